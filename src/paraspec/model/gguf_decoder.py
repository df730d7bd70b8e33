"""A decode / verify forward's decoder layers in one call where every layer runs on the GGUF
kernels (csrc/decoder.h). transformer.forward's layer loop stays the reference: the csrc
decoder runs the same kernels and ATen ops in the same order, so its bits are the loop's
(tests/model/test_gguf_decoder.py), without the ten-odd Python calls a layer between them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .ggml import FORMATS, GGUFLinear
from .ggml_parts import GGUFPartsLinear

if TYPE_CHECKING:
    from .args import ModelArgs
    from .kernels import Kernels
    from .seq_input import SeqInput

EMPTY_MASK = torch.empty(0, dtype=torch.bool)  # "no tree mask: a causal chain", for the kernels
EMPTY_COPY = torch.empty(0, dtype=torch.uint8)  # "no Q6_K verify copy"


class GgufDecoder:
    """The layers of a decode / verify forward (not a prompt's: its chunks take dense matmuls)."""

    def __init__(self, compiled):
        self.compiled = compiled

    def __call__(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, seqs: list["SeqInput"]
    ) -> torch.Tensor:
        """x [T, dim] fp32 residual stream after the embedding (updated in place); cos, sin
        [T, 1, head_dim] the rows' rotary tables; seqs as transformer.forward's."""
        return self.compiled.forward(
            x,
            cos,
            sin,
            [s.cache.k for s in seqs],
            [s.cache.v for s in seqs],
            [s.num_tokens for s in seqs],
            [s.cache.length for s in seqs],
            [s.start for s in seqs],
            [EMPTY_MASK if s.tree_mask is None else s.tree_mask for s in seqs],
            [s.key_order for s in seqs],
        )


def gguf_decoder(kernels: Kernels, a: ModelArgs, layers: list, scale: float) -> GgufDecoder | None:
    """A GgufDecoder over a Transformer's `layers` (transformer.Layer: passed in, so that this
    module never imports the forward that calls it), or None where the loop stays in Python:
    no compiled kernels, a layer linear that is not a GGUF one (or GGUF parts) on the model's kernels, or q/k
    norms (Qwen3), which the csrc decoder does not apply."""
    if kernels.module is None:
        return None
    linears = [
        lin for layer in layers for lin in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down)
    ]
    # a fused weight of mixed formats runs its parts in turn, their outputs side by side (ggml_parts.py)
    per_linear = [lin.parts if isinstance(lin, GGUFPartsLinear) else [lin] for lin in linears]
    parts = [p for ps in per_linear for p in ps]
    if any(layer.q_norm is not None for layer in layers) or not all(
        isinstance(p, GGUFLinear) and p.kernels is kernels for p in parts
    ):
        return None
    empty = torch.empty(0, dtype=torch.float32)  # "no bias"
    c = kernels.module.GgufDecoderConfig()
    c.packed = [p.packed for p in parts]
    c.fmts = [FORMATS[p.kind] for p in parts]
    c.ns = [p.out_features for p in parts]
    c.passes = [p.passes for p in parts]
    c.biases = [empty if p.bias is None else p.bias for p in parts]
    c.copies = [EMPTY_COPY if p.copy is None else p.copy for p in parts]
    c.counts = [len(ps) for ps in per_linear]
    c.attn_norms = [layer.attn_norm.float().contiguous() for layer in layers]
    c.ffn_norms = [layer.ffn_norm.float().contiguous() for layer in layers]
    c.eps, c.variant = a.norm_eps, kernels.w8a8_variant
    c.n_heads, c.n_kv, c.head_dim, c.scale = a.n_heads, a.n_kv_heads, a.head_dim, scale
    return GgufDecoder(kernels.module.GgufDecoder(c))
