"""W8A8 linears: int8 weights (symmetric, one scale per output channel) times int8 activations
(symmetric, one scale per row, computed in the call).

Per-row activation scales are what make verification lossless: with one scale per tensor (what
torch.ao's dynamic quantisation does) a row's result would depend on the other rows of the
forward. Here a row's output is a function of that row alone, bit for bit: the int8 products sum
exactly in int32 whatever the kernel's blocking, and the float epilogue is elementwise.

    y[m] = (sum_p float(q_p[m] @ Wq.T) * sx_p[m]) * sw + b
    q_0 = round(x * (127 / amax|x|)),  sx_0 = amax|x| / 127,  sw[n] = amax|W[n]| / 127
    q_1, sx_1: the same for the residual x - q_0 * sx_0 (only with residual=True)

Why the residual pass (default on): one int8 step per token loses too much on small models whose
activations carry outlier channels (perplexities in docs/design-notes.md). The second pass
doubles the int8 rows but not the weight bytes, and decoding is bound by the weight stream;
residual=False is the plain W8A8.

Kernels: csrc/w8a8.h, one call per linear, built per ISA (kernels.py picks the module this CPU
can run: AVX512-VNNI, AVX-VNNI or AVX2 vpmaddubsw inner loops over one packed layout); "int_dot",
pure torch, where no compiled kernel runs: the int8 dot products in fp32 matmuls over chunks of
at most K_CHUNK features, where every product and partial sum is an integer below 2^24 and so
exact in any summation order (torch._int_mm is not an option: on CPUs without VNNI its oneDNN
kernel saturates vpmaddubsw's int16 pairs). They all give the same bits (except with
norm_linear's fused norm, whose sum of squares runs in another order).
"""

from __future__ import annotations


import numpy as np
import torch

from .kernels import Kernels, default as default_kernels

PANEL = 32  # output channels per packed panel (csrc/w8a8.h)
Q8_0_BLOCK = 32  # GGUF Q8_0: 32 int8 + one fp16 scale (34 bytes) per block
K_CHUNK = 1024  # 127 * 127 * 1024 < 2^24: a chunk's int8 dot products are exact in fp32


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric int8: (q int8 [N, K], scale fp32 [N]); all-zero rows get
    scale 0 and q 0. Works through row chunks, so the fp32 transient stays small."""
    q, scale = torch.empty(w.shape, dtype=torch.int8), torch.empty(w.shape[0])
    for r in range(0, w.shape[0], 4096):
        c = w[r : r + 4096].float()
        amax = c.abs().amax(1, keepdim=True)
        q[r : r + 4096] = torch.round(c * torch.where(amax > 0, 127.0 / amax, 0.0)).clamp_(
            -127, 127
        )
        scale[r : r + 4096] = amax.squeeze(1) / 127.0
    return q, scale


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 of activations: (q int8 [M, K], scale fp32 [M, 1]). Same formula
    as csrc/w8a8.h, op for op (x * (1 / amax * 127), rounded half to even), so both kernels
    agree bit for bit."""
    x = x.float()
    amax = x.abs().amax(1, keepdim=True)
    inv = torch.where(amax > 0, amax.reciprocal() * 127.0, 0.0)  # zero row -> q = 0
    return torch.round(x * inv).to(torch.int8), amax * (1 / 127.0)


def q8_0_to_int8(
    raw: np.ndarray | torch.Tensor, shape: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """GGUF Q8_0 bytes of an [N, K] weight -> per-channel (q int8 [N, K], scale fp32 [N]).

    Requantises per channel rather than keeping the 32-wide block scales, so one kernel serves
    every model: the block with the largest scale keeps its int8 values exactly and the others
    lose at most half a channel step, the same error as quantising the float weights per channel.
    Dequantised values (int8 x fp16) are exact in fp32, so nothing goes through bf16; rows are
    done in chunks to keep the fp32 transient small (the LM head is the big one). The other
    choice, keeping block scales, needs a float rescale per 32 products in the inner loop.
    """
    n, k = shape
    if k % Q8_0_BLOCK:
        raise ValueError(f"Q8_0 needs K divisible by {Q8_0_BLOCK}, got {k}")
    raw = (
        torch.as_tensor(np.ascontiguousarray(raw)).view(torch.uint8).reshape(n, k // Q8_0_BLOCK, 34)
    )
    d = raw[..., :2].contiguous().view(torch.float16)  # [N, blocks, 1]
    qs = raw[..., 2:].contiguous().view(torch.int8)  # [N, blocks, 32]
    q, scale = torch.empty(n, k, dtype=torch.int8), torch.empty(n)
    for r in range(0, n, 4096):
        w = (qs[r : r + 4096].float() * d[r : r + 4096].float()).reshape(-1, k)
        q[r : r + 4096], scale[r : r + 4096] = quantize_weight(w)
    return q, scale


class Int8Linear:
    """Drop-in for linear.Linear: __call__(x [M, K] fp32/bf16, prompt) -> fp32 [M, N].

    prompt is accepted and ignored: the result is row-invariant for any number of rows, and the
    same kernel serves prompts (so the forward's padding to 4 rows is not needed here either).
    kernels: the compiled kernels to run (default: the process's, kernels.default()); with none,
    exact fp32 matmuls (int_dot). residual: the second activation pass.
    """

    def __init__(
        self,
        qweight: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        kernels: Kernels | None = None,
        residual: bool = True,
    ):
        self.out_features, self.in_features = n, k = qweight.shape
        self.kernels = kernels or default_kernels()
        self.kernel = self.kernels.label if self.kernels.module is not None else "int_dot"
        self.passes = 2 if residual else 1
        self.bias = None if bias is None else bias.float().contiguous()
        if self.kernels.module is not None:
            n_pad, k_pad = -n % PANEL, -k % 4
            q = torch.nn.functional.pad(qweight, (0, k_pad, 0, n_pad))
            # [N, K] -> [N/32, K/4, 32, 4]: each panel is one contiguous weight stream
            self.packed = q.view(-1, PANEL, (k + k_pad) // 4, 4).permute(0, 2, 1, 3).contiguous()
            # vpdpbusd sees x + 128: subtract 128 * row sums of W
            self.comp = (q.sum(1, dtype=torch.int32) * 128).contiguous()
            self.scale = torch.nn.functional.pad(scale.float(), (0, n_pad)).contiguous()
        else:
            self.weight_t = qweight.t().float().contiguous()  # [K, N] int8 values, for int_dot
            self.scale = scale.float().contiguous()

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, **kw) -> Int8Linear:
        return cls(*quantize_weight(weight), bias, **kw)

    @classmethod
    def from_q8_0(
        cls,
        raw: np.ndarray | torch.Tensor,
        shape: tuple[int, int],
        bias: torch.Tensor | None = None,
        **kw,
    ) -> Int8Linear:
        """From GGUF Q8_0 bytes (rows of q/k/v or gate/up blocks can be concatenated as is)."""
        return cls(*q8_0_to_int8(raw, shape), bias, **kw)

    def __call__(self, x: torch.Tensor, prompt: bool = False) -> torch.Tensor:
        return self._run(x, None, 0.0)

    def norm_linear(
        self, x: torch.Tensor, norm_weight: torch.Tensor, eps: float, prompt: bool = False
    ) -> torch.Tensor:
        """self(rms_norm(x, norm_weight, eps)) with the norm fused into the activation quantisation:
        per-row quantisation is invariant to a per-row factor, so 1/rms(x) just scales the row's
        scale. Saves the forward one op per call."""
        if norm_weight.dtype != torch.float32:
            norm_weight = norm_weight.float()
        return self._run(x, norm_weight, eps)

    def _run(self, x: torch.Tensor, norm: torch.Tensor | None, eps: float) -> torch.Tensor:
        if self.kernels.module is not None:
            if x.stride(-1) != 1 or x.dtype not in (torch.float32, torch.bfloat16):
                x = x.float().contiguous()
            return self.kernels.w8a8_linear(
                x,
                self.packed,
                self.comp,
                self.scale,
                self.bias,
                self.out_features,
                self.passes,
                norm,
                eps,
            )
        # the extension's arithmetic, op for op (bit-identical without `norm`; with it the
        # sum of squares runs in another order)
        x = x.float()
        r = None
        if norm is not None:
            r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            x = x * norm
        q, sx = quantize_rows(x)
        if self.passes == 1:
            y = int_dot(q, self.weight_t) * (sx if r is None else sx * r)
        else:
            q1, sx1 = quantize_rows(x - q.float() * sx)
            if r is not None:
                sx, sx1 = sx * r, sx1 * r
            acc = int_dot(torch.cat([q, q1]), self.weight_t)
            m = x.shape[0]
            y = acc[:m] * sx + acc[m:] * sx1
        y = y * self.scale
        return y if self.bias is None else y + self.bias

    def weight_rows(self, index: torch.Tensor) -> torch.Tensor:
        """Dequantised rows W[index] (fp32): lets a tied embedding share the LM head's int8 copy."""
        if self.kernels.module is not None:
            k4 = self.packed.shape[1]
            q = self.packed[index // PANEL, :, index % PANEL].reshape(-1, k4 * 4)[
                :, : self.in_features
            ]
        else:
            q = self.weight_t[:, index].t()
        return q.float() * self.scale[index, None]


def int_dot(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """q [M, K] int8 times w [K, N] (fp32 holding int8 values): the exact int32 sums, as fp32
    (what the kernels' int32 accumulators give before the epilogue), on any CPU and BLAS."""
    qf = q.float()
    acc = None
    for k0 in range(0, w.shape[0], K_CHUNK):
        part = (qf[:, k0 : k0 + K_CHUNK] @ w[k0 : k0 + K_CHUNK]).to(torch.int32)
        acc = part if acc is None else acc + part
    return acc.float()
