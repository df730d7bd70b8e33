"""A decode / verify forward's decoder layers in one call where every layer runs on the GGUF
kernels (csrc/decoder.h). transformer.forward's layer loop stays the reference: the csrc
decoder runs the same kernels and ATen ops in the same order, so its bits are the loop's
(tests/model/test_gguf_decoder.py), without the ten-odd Python calls a layer between them."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .ggml import FORMATS, GGUFLinear

if TYPE_CHECKING:
    from .args import ModelArgs
    from .kernels import Kernels
    from .seq_input import SeqInput

EMPTY_MASK = torch.empty(0, dtype=torch.bool)   # "no tree mask: a causal chain", for the kernels


class GgufDecoder:
    """The layers of a decode / verify forward (not a prompt's: its chunks take dense matmuls)."""

    def __init__(self, compiled):
        self.compiled = compiled

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, seqs: list["SeqInput"]) -> torch.Tensor:
        """x [T, dim] fp32 residual stream after the embedding (updated in place); cos, sin
        [T, 1, head_dim] the rows' rotary tables; seqs as transformer.forward's."""
        return self.compiled.forward(
            x, cos, sin, [s.cache.k for s in seqs], [s.cache.v for s in seqs], [s.num_tokens for s in seqs],
            [s.cache.length for s in seqs], [s.start for s in seqs],
            [EMPTY_MASK if s.tree_mask is None else s.tree_mask for s in seqs], [s.key_order for s in seqs])


def gguf_decoder(kernels: Kernels, a: ModelArgs, layers: list, scale: float) -> GgufDecoder | None:
    """A GgufDecoder over a Transformer's `layers` (transformer.Layer: passed in, so that this
    module never imports the forward that calls it), or None where the loop stays in Python:
    no compiled kernels, a layer linear that is not a GGUF one on the model's kernels, or q/k
    norms (Qwen3), which the csrc decoder does not apply."""
    if kernels.module is None:
        return None
    linears = [lin for layer in layers for lin in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down)]
    if any(layer.q_norm is not None for layer in layers) or not all(
            isinstance(lin, GGUFLinear) and lin.kernels is kernels for lin in linears):
        return None
    empty = torch.empty(0, dtype=torch.float32)     # "no bias"
    return GgufDecoder(kernels.module.GgufDecoder(
        [lin.packed for lin in linears], [FORMATS[lin.kind] for lin in linears],
        [lin.out_features for lin in linears], [lin.passes for lin in linears],
        [empty if lin.bias is None else lin.bias for lin in linears],
        [layer.attn_norm.float().contiguous() for layer in layers],
        [layer.ffn_norm.float().contiguous() for layer in layers],
        a.norm_eps, kernels.w8a8_variant, a.n_heads, a.n_kv_heads, a.head_dim, scale))
