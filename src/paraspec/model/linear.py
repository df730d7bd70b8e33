"""The forward's linears: which one a weight becomes (make_linear), and the plain one (Linear).

A weight in bf16 or fp32 is a Linear: the compiled kernels' csrc linear for decode and verify
rows, torch's fastest matmul for prompt chunks, and without kernels torch's oneDNN prepacked
matmul on a multiple of ROW_MULTIPLE rows. int8 weights are quant.Int8Linear, GGUF blocks
ggml.GGUFLinear (or ggml_parts.GGUFPartsLinear); all four take the same calls.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import kernels as cpu_kernels
from .ggml import GGUFLinear, GGUFWeight
from .ggml_parts import GGUFParts, GGUFPartsLinear

ROW_MULTIPLE = 4  # torch's matmuls run on a multiple of this many rows (row invariance, Linear)


MATMULS = ("wqkv", "wo", "w_gate_up", "w_down", "lm_head", "tok_embeddings")  # weights' short names


class Linear:
    """y = x @ W.T (+ b) for an fp32 or bf16 weight, exact per row where drafts are verified.

    Decode/verify rows (the default) go through the csrc linear of the model's kernels: fp32
    FMA over k in a fixed order, so a row's bits depend on that row alone (any row count, place
    or thread count) and are the same on AVX2 and AVX-512. Prompt chunks (prompt=True), which
    need no row invariance, take torch's fastest matmul: oneDNN's prepacked one for bf16 where it
    exists, MKL's F.linear for fp32. Without compiled kernels, decode rows take torch too, padded
    to a multiple of ROW_MULTIPLE rows and through oneDNN's prepacked matmul, which measured
    row-invariant where MKL's sgemm did not (docs/design-notes.md, "Row invariance of BLAS
    matmuls"; `benchmarks/kernels.py --only invariance` checks this CPU)."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        kernels: cpu_kernels.Kernels | None = None,
    ):
        self.weight = weight.contiguous()
        self.bias = bias
        self.out_features, self.in_features = weight.shape
        module = (kernels or cpu_kernels.default()).module
        self.kernel = None if module is None else module.linear
        self.bias32 = None if bias is None else bias.float().contiguous()
        self.packed = None
        # oneDNN's packed copy: for bf16 prompts, and for every decode row without kernels
        if hasattr(torch.ops.mkldnn, "_linear_pointwise") and (
            self.kernel is None or weight.dtype == torch.bfloat16
        ):
            try:  # a torch build that cannot pack (or run) it keeps F.linear
                packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, 1)
                torch.ops.mkldnn._linear_pointwise(
                    torch.zeros(1, self.in_features, dtype=weight.dtype),
                    packed,
                    None,
                    "none",
                    [],
                    "",
                )
                self.packed = packed
            except (RuntimeError, AttributeError):
                pass

    def _mm(self, x: torch.Tensor, prompt: bool) -> torch.Tensor:
        if self.packed is not None and not (prompt and x.dtype == torch.float32):
            y = torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
            return y if self.bias is None else y + self.bias
        if self.bias is not None and self.bias.dtype != x.dtype:  # fp32 bias beside bf16 weights
            return F.linear(x, self.weight) + self.bias  # added in fp32, as the packed road does
        return F.linear(x, self.weight, self.bias)

    def norm_linear(
        self, x: torch.Tensor, norm_weight: torch.Tensor, eps: float, prompt: bool = False
    ) -> torch.Tensor:
        """self(rms_norm(x)): the csrc linear fuses the two (one call), torch runs two ops."""
        if self.kernel is not None and not prompt:
            return self.kernel(x, self.weight, self.bias32, norm_weight, eps)
        return self(rms_norm(x, norm_weight, eps), prompt)

    def __call__(self, x: torch.Tensor, prompt: bool = False) -> torch.Tensor:
        if self.kernel is not None and not prompt:
            return self.kernel(
                x if x.dtype == torch.float32 else x.float(), self.weight, self.bias32
            )
        x = x.to(self.weight.dtype)
        m = x.shape[0]
        if m % ROW_MULTIPLE and not prompt:
            pad = ROW_MULTIPLE - m % ROW_MULTIPLE
            return self._mm(torch.cat([x, x[-1:].expand(pad, -1)]), prompt)[:m]
        return self._mm(x, prompt)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # x: [..., dim] fp32; one fused op (same math as HF's LlamaRMSNorm in fp32)
    return F.rms_norm(x, weight.shape, weight, eps)


def make_linear(
    weight: torch.Tensor | GGUFWeight,
    bias: torch.Tensor | None = None,
    quantization: str | None = None,
    kernels: cpu_kernels.Kernels | None = None,
    passes: int = 2,
):
    """A Linear in the weight's dtype, an Int8Linear (W8A8, see quant.py) built from it, or a
    GGUFLinear over GGUF blocks (ggml.py); passes: their int8 activation passes (1 or 2)."""
    if isinstance(weight, GGUFWeight):
        return GGUFLinear(weight, bias, kernels=kernels, residual=passes == 2)
    if isinstance(weight, GGUFParts):
        return GGUFPartsLinear(weight, bias, kernels=kernels, residual=passes == 2)
    if quantization == "w8a8":
        from .quant import Int8Linear

        return Int8Linear.from_float(weight.float(), bias, kernels=kernels, residual=passes == 2)
    return Linear(weight, bias, kernels)


def plain_gguf_weights(weights: dict, dtype: torch.dtype) -> dict:
    """A GGUF model's weights with what no GGUF kernel runs (a matmul weight stored as floats)
    in `dtype`, for a plain Linear; GGUF blocks and the fp32 norms as they are."""
    return {
        k: w
        if isinstance(w, (GGUFWeight, GGUFParts)) or k.rsplit(".", 1)[-1] not in MATMULS
        else w.to(dtype)
        for k, w in weights.items()
    }
