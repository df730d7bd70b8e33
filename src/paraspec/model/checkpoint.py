"""What every loader hands the forward: LoadedModel, the tensor names transformer.py takes, and
their dtypes. A checkpoint's q/k/v and gate/up weights are fused here, whatever file they came from.

Names (per layer i): layers.i.{attn_norm, ffn_norm, wqkv, bqkv?, wo, bo?, w_gate_up, w_down,
q_norm?, k_norm?}, plus tok_embeddings, norm and lm_head (when not tied).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import ModelLoadError
from . import ggml, ggml_parts
from .args import SUPPORTED_ARCHS, ModelArgs
from .ggml import GGUFWeight
from .ggml_parts import GGUFParts

logger = logging.getLogger("paraspec.loader")

# act on the fp32 stream
FP32_WEIGHTS = (
    "attn_norm",
    "ffn_norm",
    "norm",
    "q_norm",
    "k_norm",
    "bqkv",
    "bo",
)


@dataclass
class LoadedModel:
    args: ModelArgs
    weights: dict[str, torch.Tensor]
    path: Path
    name: str
    tokenizer_source: dict  # what tokenizer.py needs (see Tokenizer.from_source)
    # the file's metadata (a GGUF's fields, an HF folder's config.json) and every tensor name it
    # holds, kept so that later checks (architecture.check_loaded) need not read the file again
    metadata: dict = field(default_factory=dict)
    tensor_names: tuple[str, ...] = ()


def cast_weights(
    weights: dict[str, np.ndarray | torch.Tensor | GGUFWeight], dtype: torch.dtype
) -> dict:
    """Matmul weights go to `dtype`; norms and biases stay fp32 (they act on the fp32 stream);
    GGUF blocks stay as they are."""
    out = {}
    for name, w in weights.items():
        if isinstance(w, (GGUFWeight, GGUFParts)):
            out[name] = w
            continue
        t = (
            torch.from_numpy(np.array(w, dtype=np.float32, copy=not w.flags.writeable))
            if isinstance(w, np.ndarray)
            else w
        )
        short = name.rsplit(".", 1)[-1]
        out[name] = t.float() if short in FP32_WEIGHTS else t.to(dtype)
    return out


def check_arch(arch: str, where: str) -> None:
    if arch not in SUPPORTED_ARCHS:
        raise ModelLoadError(
            f"unsupported architecture {arch!r} in {where}; paraspec runs "
            f"{', '.join(SUPPORTED_ARCHS)} models: use a model of one of those"
        )


def fuse_layer(
    w: dict,
    i: int,
    q,
    k,
    v,
    o,
    gate,
    up,
    down,
    attn_norm,
    ffn_norm,
    q_bias=None,
    k_bias=None,
    v_bias=None,
    q_norm=None,
    k_norm=None,
    o_bias=None,
) -> None:
    p = f"layers.{i}."
    w[p + "wqkv"] = concat([q, k, v], p + "wqkv")
    if q_bias is not None:
        w[p + "bqkv"] = np.concatenate([q_bias, k_bias, v_bias], axis=0)
    w[p + "wo"] = o
    if o_bias is not None:  # a llama with attention_bias: o_proj has one too (Qwen2's has not)
        w[p + "bo"] = o_bias
    w[p + "w_gate_up"] = concat([gate, up], p + "w_gate_up")
    w[p + "w_down"] = down
    w[p + "attn_norm"] = attn_norm
    w[p + "ffn_norm"] = ffn_norm
    if q_norm is not None:
        w[p + "q_norm"] = q_norm
        w[p + "k_norm"] = k_norm


def concat(parts: list, name: str):
    """Rows of fused weights stacked; GGUF blocks stay blocks (parts of different formats: a
    GGUFParts, each part in its own format), blocks beside float parts are dequantised (with a
    log line)."""
    if all(isinstance(p, GGUFWeight) for p in parts):
        fused = ggml_parts.stack(parts)
        if fused is not None:
            return fused
    if any(isinstance(p, GGUFWeight) for p in parts):
        logger.info(
            "paraspec: %s mixes %s; dequantised",
            name,
            "/".join(p.kind if isinstance(p, GGUFWeight) else "float" for p in parts),
        )
        parts = [ggml.dequantize(p).numpy() if isinstance(p, GGUFWeight) else p for p in parts]
    return np.concatenate(parts, axis=0)
