"""ModelArgs: the shape of a Llama / Qwen2 / Qwen3 decoder, read from GGUF or HF metadata."""

from __future__ import annotations

from dataclasses import dataclass, field

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3")


@dataclass(frozen=True)
class ModelArgs:
    arch: str  # "llama" | "qwen2" | "qwen3"
    vocab_size: int
    dim: int  # hidden size
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_dim: int  # MLP intermediate size
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # HF rope_scaling (llama3 type)
    rope_scaling: dict | None = field(default=None, hash=False, compare=False)
    max_seq_len: int = 4096  # context length the model was trained for
    tie_embeddings: bool = True
    qkv_bias: bool = False  # Qwen2 has biases on q/k/v
    qk_norm: bool = False  # Qwen3 RMS-normalises q and k per head
