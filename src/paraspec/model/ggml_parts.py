"""A fused weight (q/k/v, gate/up) whose parts are stored in different GGUF formats, run as stored.

llama.cpp's Q4_K_M keeps attn_v (and some ffn_down / ffn_up) in Q6_K, or in a Q5_0 / Q8_0
fallback where rows are not whole 256-superblocks, beside Q4_K q and k. One packed weight holds
one format, so such a fused weight stays a list of GGUF weights: each part an ordinary GGUFLinear
with its own format and kernel call, the outputs concatenated along the output dimension in the
parts' order. A part's output is that of a GGUF linear on the same rows, and concatenating copies
bits, so row invariance and the kernel-vs-reference equality hold as for one GGUFLinear.
Consecutive parts of one format are stacked into one (ggml.concat): fewer calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .ggml import GGUFLinear, GGUFWeight, concat, prompt_rows
from .kernels import Kernels


@dataclass
class GGUFParts:
    """[N, K] weight stacked from GGUF weights of the same K (rows: the parts' in order)."""

    parts: list[GGUFWeight]

    @property
    def shape(self) -> tuple[int, int]:
        return sum(p.shape[0] for p in self.parts), self.parts[0].shape[1]

    @property
    def kind(self) -> str:
        return "+".join(p.kind for p in self.parts)


def stack(parts: list[GGUFWeight]) -> GGUFWeight | GGUFParts | None:
    """The parts' rows stacked: one GGUFWeight where all share a format, else GGUFParts with
    each run of one format stacked; None if their row lengths (K) differ."""
    if len({p.shape[1] for p in parts}) != 1:
        return None
    runs: list[list[GGUFWeight]] = []
    for p in parts:
        if runs and runs[-1][0].kind == p.kind:
            runs[-1].append(p)
        else:
            runs.append([p])
    merged = [r[0] if len(r) == 1 else concat(r) for r in runs]
    return merged[0] if len(merged) == 1 else GGUFParts(merged)


class GGUFPartsLinear:
    """GGUFLinear's interface over GGUFParts: __call__(x [M, K], prompt) and norm_linear -> fp32
    [M, N], each part's GGUFLinear in turn. bias [N] is split along the parts' rows."""

    def __init__(
        self,
        weight: GGUFParts,
        bias: torch.Tensor | None = None,
        kernels: Kernels | None = None,
        residual: bool = True,
    ):
        sizes = [p.shape[0] for p in weight.parts]
        biases = [None] * len(sizes) if bias is None else list(bias.float().split(sizes))
        self.parts = [
            GGUFLinear(p, b, kernels=kernels, residual=residual)
            for p, b in zip(weight.parts, biases)
        ]
        first = self.parts[0]
        self.kind = weight.kind
        self.out_features, self.in_features = weight.shape
        self.kernels, self.kernel, self.passes = first.kernels, first.kernel, first.passes

    @property
    def dense(self) -> bool:
        return all(p.dense for p in self.parts)

    def _prompt_dense(self, x: torch.Tensor, prompt: bool) -> bool:
        return prompt and self.dense and x.shape[0] >= prompt_rows(self.kernels, self.passes)

    def __call__(self, x: torch.Tensor, prompt: bool = False) -> torch.Tensor:
        if self._prompt_dense(x, prompt):
            return self._dense(x)
        return torch.cat([p._run(x, None, 0.0) for p in self.parts], -1)

    def norm_linear(
        self, x: torch.Tensor, norm_weight: torch.Tensor, eps: float, prompt: bool = False
    ) -> torch.Tensor:
        """self(rms_norm(x)). On the kernels each part fuses the norm into its activation
        quantisation, as a GGUFLinear does (the norm is a per-row factor on each dx: one sum of
        squares per row and part, beside the weight's stream); the dense road norms once."""
        if self._prompt_dense(x, prompt):
            return self._dense(F.rms_norm(x.float(), norm_weight.shape, norm_weight.float(), eps))
        norm = norm_weight.float()
        return torch.cat([p._run(x, norm, eps) for p in self.parts], -1)

    def _dense(self, x: torch.Tensor) -> torch.Tensor:
        """A prompt chunk: each part's dequantised copy in turn (the scratch holds one at a time)."""
        return torch.cat([p._dense(x) for p in self.parts], -1)
