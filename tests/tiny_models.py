"""Tiny random-initialised models saved as Hugging Face folders (weights + byte-level tokenizer)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
          "+ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_level_tokenizer():
    """Byte-level BPE with no merges: one token per byte, plus ChatML specials (ids 256..258)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab, [], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok


def make_tiny_model(path: Path, arch: str = "llama", seed: int = 0, n_layers: int = 2, hidden: int = 64,
                    heads: int = 4, kv_heads: int = 2, init_std: float = 0.08, **extra) -> Path:
    import transformers

    tok = byte_level_tokenizer()
    vocab = tok.get_vocab_size()
    cls_config, cls_model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[arch]
    kwargs = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=n_layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=1024,
                  rms_norm_eps=1e-6, tie_word_embeddings=extra.pop("tie_word_embeddings", arch != "qwen2"),
                  initializer_range=init_std, bos_token_id=None, eos_token_id=vocab - 1, pad_token_id=0)
    if arch == "qwen3":
        kwargs["head_dim"] = hidden // heads
    kwargs.update(extra)
    config = cls_config(**kwargs)
    torch.manual_seed(seed)
    model = cls_model(config).float().eval()
    with torch.no_grad():  # norms start at 1; perturb them so the test sees their weights
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>", "bos_token": None, "chat_template": CHATML, "add_bos_token": False}))
    return path


def _gguf_permute(w, n_heads: int):
    """HF rotate-half Q/K rows -> llama.cpp's interleaved layout (what convert_hf_to_gguf does)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(hf_dir: Path, out: Path, quant: str = "F32", arch_name: str | None = None) -> Path:
    """Convert a tiny HF llama/qwen2 folder to GGUF (tensors in `quant`: F32, F16, I8, a type the
    gguf package quantises (Q8_0, Q4_0, ...), or Q4_K / Q6_K by paraspec's own K quantiser)."""
    import gguf

    from paraspec.model.ggml_kquants import QUANTIZERS
    import numpy as np
    from safetensors.numpy import load_file

    config = json.loads((hf_dir / "config.json").read_text())
    arch = config["model_type"]
    sd = {k.removeprefix("model."): v for k, v in load_file(str(next(hf_dir.glob("*.safetensors")))).items()}
    w = gguf.GGUFWriter(str(out), arch_name or arch)
    w.add_uint32(f"{arch_name or arch}.block_count", config["num_hidden_layers"])
    w.add_uint32(f"{arch_name or arch}.context_length", config["max_position_embeddings"])
    w.add_uint32(f"{arch_name or arch}.embedding_length", config["hidden_size"])
    w.add_uint32(f"{arch_name or arch}.feed_forward_length", config["intermediate_size"])
    w.add_uint32(f"{arch_name or arch}.attention.head_count", config["num_attention_heads"])
    w.add_uint32(f"{arch_name or arch}.attention.head_count_kv", config["num_key_value_heads"])
    w.add_float32(f"{arch_name or arch}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    w.add_float32(f"{arch_name or arch}.rope.freq_base", 10000.0)
    tok = byte_level_tokenizer()
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.merges", [])
    w.add_array("tokenizer.ggml.token_type", [3 if t in SPECIALS else 1 for t in tokens])
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab["<|im_end|>"])
    w.add_string("tokenizer.chat_template", CHATML)
    qtype = getattr(gguf.GGMLQuantizationType, quant)

    def put(name: str, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if a.ndim == 1 or quant == "F32":
            w.add_tensor(name, a)
        elif quant == "F16":
            w.add_tensor(name, a.astype(np.float16))
        elif quant == "I8":
            w.add_tensor(name, np.clip(np.round(a * 100), -127, 127).astype(np.int8))
        elif quant in QUANTIZERS:
            w.add_tensor(name, QUANTIZERS[quant](a), raw_dtype=qtype)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)

    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    put("token_embd.weight", sd["embed_tokens.weight"])
    put("output_norm.weight", sd["norm.weight"])
    if "lm_head.weight" in sd:
        put("output.weight", sd["lm_head.weight"])
    for i in range(config["num_hidden_layers"]):
        p, b = f"layers.{i}.", f"blk.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = _gguf_permute(q, heads), _gguf_permute(k, kv)
        put(b + "attn_q.weight", q)
        put(b + "attn_k.weight", k)
        put(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        for proj in ("q", "k", "v"):
            if p + f"self_attn.{proj}_proj.bias" in sd:
                put(b + f"attn_{proj}.bias", sd[p + f"self_attn.{proj}_proj.bias"])
        put(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
        put(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        put(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
