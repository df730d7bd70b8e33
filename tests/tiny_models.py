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
