"""The GGUF kernels' arithmetic in torch, op for op (ggml.py's module doc has the formulas): the
int8 activation quantisation, one or two passes, and the block sums with their float steps. The
torch path of GGUFLinear runs these where no compiled kernel does, and the tests hold the kernels
to them bit for bit."""

from __future__ import annotations

import torch

BLOCK = 32
OFFSET = {"Q4_0": 8, "Q5_0": 16}  # what the stored unsigned values are centred on


def quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row, per-32-block int8 of activations [M, K]: (q int8 [M, K], dx fp32 [M, B],
    xs int32 [M, B] = sum of q per block). The kernel's formula op for op."""
    q, dx, xs, _ = _quantize(x)
    return q, dx, xs


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """quantize_blocks' (q, dx, xs) and inv [M, B], the factor q was rounded from (x * inv)."""
    m, k = x.shape
    xb = x.float().view(m, k // BLOCK, BLOCK)
    amax = xb.abs().amax(-1)
    inv = torch.where(amax > 0, amax.reciprocal() * 127.0, 0.0)  # zero block -> q = 0
    q = torch.round(xb * inv.unsqueeze(-1)).to(torch.int8)
    return q.view(m, k), amax * (1 / 127.0), q.sum(-1, dtype=torch.int32), inv


def quantize_residual(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Both passes of the kernel's two-pass quantisation of x [M, K] (module doc), op for op:
    (q0, dx0, xs0) = quantize_blocks(x), then the rounding residual r = x - q0 * dx0 on the tied
    scale dx1 = dx0 / 256: q1 = clamp(round(r * (inv0 * 256)), -127, 127), xs1 its block sums.
    inv0 * 256 and dx0 * (1 / 256) are exact in fp32 (powers of two). |r| <= ~dx0 / 2, so q1
    uses about the range an own scale (amax_r / 127) would: the same resolution."""
    m, k = x.shape
    q0, dx0, xs0, inv0 = _quantize(x)
    r = x.float().view(m, -1, BLOCK) - q0.float().view(m, -1, BLOCK) * dx0.unsqueeze(-1)
    q1 = torch.round(r * (inv0 * 256.0).unsqueeze(-1)).clamp(-127, 127).to(torch.int8)
    return q0, dx0, xs0, q1.view(m, k), dx0 * (1 / 256.0), q1.sum(-1, dtype=torch.int32)


def reference_dot(
    q: torch.Tensor,
    dx: torch.Tensor,
    xs: torch.Tensor,
    wq: torch.Tensor,
    d: torch.Tensor,
    m: torch.Tensor | None,
    kind: str,
    sub: torch.Tensor | None = None,
    first: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The kernel's sums in torch: q [M, K] int8, dx / xs [M, B]; wq [B, 32, N] fp32 holding the
    stored integers, d / m [B, N] fp32 (Q6_K: wq [2B, 16, N], sub [2B, N] its 16-block scales).
    Block sums are exact in fp32 (|isum| < 2^24; Q6_K's scaled pair of halves too).
    first: two passes (module doc), (q0, xs0) of the first with (q, dx, xs) the residual's:
    per block the passes combine before the float step, I = 256 s0 + s1 in int32 (exact; Q6_K:
    256 float(s0) + float(s1) in fp32) with xs = 256 xs0 + xs1, and dx the residual's dx1."""
    rows, nb = dx.shape

    def sums(q: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:  # [B, M, N] exact integers in fp32
        w = wq.shape[1]
        isum = torch.bmm(q.float().view(rows, -1, w).transpose(0, 1), wq)
        if sub is not None:  # sc_a isum_a + sc_b isum_b
            isum = isum[0::2] * sub[0::2, None] + isum[1::2] * sub[1::2, None]
        if kind in OFFSET:
            isum = isum - OFFSET[kind] * xs.t().float().unsqueeze(-1)
        return isum

    s = sums(q, xs)
    if first is not None:
        s0 = sums(first[0], first[1])
        if sub is not None:  # Q6_K: 256 |s0| can pass 2^31, so the pair adds in fp32
            s = s0 * 256.0 + s
        else:  # |s0| < 2^17: 256 s0 + s1 fits int32
            s = (s0.to(torch.int32) * 256 + s.to(torch.int32)).float()
        xs = first[1] * 256 + xs
    xsf = xs.float()
    acc = torch.zeros(rows, wq.shape[2])
    for b in range(nb):
        t = s[b] * (d[b] * dx[:, b : b + 1])
        if m is not None:
            t = t + m[b] * (dx[:, b : b + 1] * xsf[:, b : b + 1])
        acc = acc + t
    return acc
