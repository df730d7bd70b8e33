"""Tiny random-initialised models saved as Hugging Face folders (weights + byte-level tokenizer)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
    "rope_theta": 500000.0,
}
QWEN_ROPE = {"rope_type": "default", "rope_theta": 1000000.0}
FAMILIES = {  # the families users run, tiny: name -> (model_type, make_tiny_model arguments)
    "qwen2.5": ("qwen2", dict(rope_parameters=QWEN_ROPE)),
    "qwen3": ("qwen3", dict(head_dim=32, rope_parameters=QWEN_ROPE)),
    "llama3": ("llama", dict(heads=8, kv_heads=2, rope_parameters=LLAMA3_ROPE)),
    "llama-bias": ("llama", dict(kv_heads=2, attention_bias=True)),
}


def family_dir(tiny_model_dir, family: str, tied: bool) -> Path:
    """A FAMILIES model from conftest's tiny_model_dir factory, with a tied or untied head."""
    arch, kwargs = FAMILIES[family]
    return tiny_model_dir(arch, tie_word_embeddings=tied, **kwargs)


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


def make_tiny_model(
    path: Path,
    arch: str = "llama",
    seed: int = 0,
    n_layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    init_std: float = 0.08,
    **extra,
) -> Path:
    import transformers

    tok = byte_level_tokenizer()
    vocab = tok.get_vocab_size()
    cls_config, cls_model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[arch]
    kwargs = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=1024,
        rms_norm_eps=1e-6,
        tie_word_embeddings=extra.pop("tie_word_embeddings", arch != "qwen2"),
        initializer_range=init_std,
        bos_token_id=None,
        eos_token_id=vocab - 1,
        pad_token_id=0,
    )
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
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "eos_token": "<|im_end|>",
                "bos_token": None,
                "chat_template": CHATML,
                "add_bos_token": False,
            }
        )
    )
    return path


def _gguf_permute(w, n_heads: int):
    """HF rotate-half Q/K rows -> llama.cpp's interleaved layout (what convert_hf_to_gguf does)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(config: dict) -> "numpy.ndarray | None":  # noqa: F821  (numpy: imported inside)
    """convert_hf_to_gguf's rope_freqs.weight for a llama3 rope_scaling: per frequency, the
    divisor of its inverse frequency (computed in fp32 as the converter does). None otherwise."""
    import math

    import numpy as np
    import torch as t

    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if rope.get("rope_type", rope.get("type")) != "llama3":
        return None
    base = config.get("rope_theta") or rope.get("rope_theta", 10000.0)
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (base ** (t.arange(0, dim, 2, dtype=t.float32) / dim))
    factor, low, high = (
        rope.get("factor", 8.0),
        rope.get("low_freq_factor", 1.0),
        rope.get("high_freq_factor", 4.0),
    )
    old_ctx = rope.get("original_max_position_embeddings", 8192)
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(
    hf_dir: Path,
    out: Path,
    quant: str = "F32",
    arch_name: str | None = None,
    skip_tensors: tuple[str, ...] = (),
    metadata: dict[str, int] | None = None,
) -> Path:
    """Convert a tiny HF llama/qwen2/qwen3 folder (one file or shards) to GGUF the way llama.cpp's
    convert_hf_to_gguf.py does: its metadata keys, tensor names, llama's q/k row permutation
    (biases too), rope_freqs.weight for llama3 rope, no output.weight when tied, 1-D tensors in
    F32. Matmul tensors in `quant`: F32, F16, I8, a type the gguf package quantises (Q8_0,
    Q4_0, ...), or Q4_K / Q6_K by paraspec's own K quantiser. The tokenizer is the test one.
    For the error tests: skip_tensors are left out, metadata's uint32 keys replace (or add to) the
    converter's."""
    import gguf

    from paraspec.model.ggml_kquants import QUANTIZERS
    import numpy as np
    from safetensors.numpy import load_file

    config = json.loads((hf_dir / "config.json").read_text())
    arch = config["model_type"]
    sd = {}
    for f in sorted(hf_dir.glob("*.safetensors")):  # one file or shards (fp32)
        sd.update({k.removeprefix("model."): v for k, v in load_file(str(f)).items()})
    name = arch_name or arch
    w = gguf.GGUFWriter(str(out), name)
    metadata = dict(metadata or {})
    add_uint32 = w.add_uint32
    w.add_uint32 = lambda key, value: add_uint32(key, metadata.pop(key, value))
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim")
    w.add_uint32(f"{name}.block_count", config["num_hidden_layers"])
    w.add_uint32(f"{name}.context_length", config["max_position_embeddings"])
    w.add_uint32(f"{name}.embedding_length", config["hidden_size"])
    w.add_uint32(f"{name}.feed_forward_length", config["intermediate_size"])
    w.add_uint32(f"{name}.attention.head_count", heads)
    w.add_uint32(f"{name}.attention.head_count_kv", config["num_key_value_heads"])
    theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get(
        "rope_theta", 10000.0
    )
    w.add_float32(f"{name}.rope.freq_base", float(theta))
    w.add_float32(f"{name}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    if head_dim is not None:
        w.add_uint32(f"{name}.attention.key_length", head_dim)
        w.add_uint32(f"{name}.attention.value_length", head_dim)
    w.add_uint32("general.file_type", {"F32": 0, "F16": 1}.get(quant, 7))
    if arch == "llama":
        w.add_uint32(f"{name}.vocab_size", config["vocab_size"])
        w.add_uint32(f"{name}.rope.dimension_count", head_dim or config["hidden_size"] // heads)
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
        if name in skip_tensors:
            return
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

    kv = config["num_key_value_heads"]
    if (factors := llama3_rope_factors(config)) is not None:
        put("rope_freqs.weight", factors)
    put("token_embd.weight", sd["embed_tokens.weight"])
    put("output_norm.weight", sd["norm.weight"])
    if "lm_head.weight" in sd:
        put("output.weight", sd["lm_head.weight"])
    for i in range(config["num_hidden_layers"]):
        p, b = f"layers.{i}.", f"blk.{i}."
        for proj, n in (("q", heads), ("k", kv), ("v", None)):
            for kind in ("weight", "bias"):
                t = sd.get(p + f"self_attn.{proj}_proj.{kind}")
                if t is not None:
                    put(
                        b + f"attn_{proj}.{kind}",
                        _gguf_permute(t, n) if arch == "llama" and n else t,
                    )
        for proj in ("q", "k"):
            if p + f"self_attn.{proj}_norm.weight" in sd:
                put(b + f"attn_{proj}_norm.weight", sd[p + f"self_attn.{proj}_norm.weight"])
        put(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        if p + "self_attn.o_proj.bias" in sd:
            put(b + "attn_output.bias", sd[p + "self_attn.o_proj.bias"])
        put(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
        put(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        put(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
    for key, value in metadata.items():
        add_uint32(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def write_one_layer_gguf(out: Path, n_tokens: int, tokenizer_fields) -> Path:
    """A GGUF with one tiny random llama layer over `n_tokens` embeddings, so paraspec's loader
    reads it as a model, and the tokenizer keys `tokenizer_fields(writer)` adds: the vocabulary
    tests' files."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(out), "llama")
    dim, hidden = 16, 32
    for key, v in (
        ("block_count", 1),
        ("context_length", 256),
        ("embedding_length", dim),
        ("feed_forward_length", hidden),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
    ):
        w.add_uint32(f"llama.{key}", v)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-6)
    tokenizer_fields(w)
    rng = np.random.default_rng(0)
    head_dim = dim // 2
    shapes = {
        "token_embd.weight": (n_tokens, dim),
        "output_norm.weight": (dim,),
        "blk.0.attn_q.weight": (dim, dim),
        "blk.0.attn_k.weight": (head_dim, dim),
        "blk.0.attn_v.weight": (head_dim, dim),
        "blk.0.attn_output.weight": (dim, dim),
        "blk.0.ffn_gate.weight": (hidden, dim),
        "blk.0.ffn_up.weight": (hidden, dim),
        "blk.0.ffn_down.weight": (dim, hidden),
        "blk.0.attn_norm.weight": (dim,),
        "blk.0.ffn_norm.weight": (dim,),
    }
    for name, shape in shapes.items():
        w.add_tensor(name, rng.standard_normal(shape, dtype=np.float32) * 0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
