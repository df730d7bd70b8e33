"""GGUF block-quantised weights run as stored: Q4_0, Q4_1, Q5_0, Q8_0 and the K-quants Q4_K and
Q6_K (ggml_kquants.py), as linears (quantization "gguf").

A GGUF file's weights stay in their blocks (32 values with an fp16 scale d, for Q4_1 an fp16 min
m; K-quants: 256-superblocks of 32-blocks with 6-bit scales, Q6_K's of 16-blocks with int8 ones);
activations are quantised per row and per 32-block to int8, as llama.cpp's Q8 activations are,
so a row's result is a function of that row alone and parallel decoding stays exactly AR's. The
arithmetic (csrc/gguf.h has it in full):

    q = round(x * (127 / amax)), dx = amax / 127, xs = sum q          per row and 32-block
    Q4_0: t = float(isum - 8 xs) * (d dx)    Q4_1: t = float(isum) * (d dx) + m (dx xs)
    Q5_0: t = float(isum - 16 xs) * (d dx)   Q8_0: t = float(isum) * (d dx)
    Q4_K: as Q4_1 with d = d_super * sc, m = -(dmin_super * mn) (both exact in fp32)
    Q6_K: t = float(isum_a * sc_a + isum_b * sc_b) * (d dx)   (two signed 16-halves, exact)
    y = sum of t over the blocks in order (+ bias)

with isum the exact integer dot product of the block's stored values and q. With residual=True
(the default) each block's rounding residual r = x - q * dx is quantised again on a scale tied to
the first, dx1 = dx / 256 (exact): q1 = clamp(round(r * (inv * 256)), -127, 127) with inv = 127 /
amax the factor q came from (quantize_residual). |r| <= ~dx / 2, so q1 has about the resolution
an own scale (amax_r / 127) would give. The kernels run q1 as a second sub-row of integer sums
(the weights stream once either way), and the two combine per block before any float:

    I = 256 isum_0 + isum_1 (each less its offset terms; int32, exact), xs = 256 xs_0 + xs_1
    t = the format's float step above with isum = I, dx = dx1 and that xs        (one per row)
    Q6_K: 256 v can pass 2^31, so float(v_0) * 256 + float(v_1) (fp32, one rounding) is float(I)

One int8 step per 32 values alone loses 3-4 % teacher-forced top-1 agreement on the bundled model
(the quality gate, benchmarks/gguf_quality_gate.py), as llama.cpp's numerics do; the two passes keep it at
~99.98 %, for twice the integer work (one is the default: kernels.resolve_activation_passes). GGUFLinear runs the
compiled kernel of the model's kernels (csrc/gguf.h: AVX-512 VNNI, AVX-VNNI or AVX2) on a repacked
copy of the same values (pack()), or where none runs, the torch reference (ggml_reference.py), which does the
same fp32 operations in the same order: both give the same bits (with a fused RMSNorm, the norm's
sum of squares runs in another order, as in quant.py).

Prompt chunks of prompt_rows() rows or more take another road: a prompt is compute-bound, not
bandwidth-bound, and needs no row invariance (every decoding mode starts from the same prefill).
The kernel writes the layer's weight back to a plain [N, K] matrix in a reused scratch buffer
(csrc/gguf_dequant.h, the values dequantize() gives, in every format) and torch's matmul runs it:
bf16 through oneDNN where the CPU multiplies bf16 natively (AMX, AVX512-BF16), fp32 elsewhere.
Which road is faster depends on the kernel's cost per row, so on the activation passes: with two,
the dense road won chunks from 128 rows on AMX and from ~256 elsewhere; with one (the default) it
lost at every chunk size off AMX, whose threshold stays as tuned under two passes (PROMPT_ROWS;
benchmarks/prefill.py --roads times the two roads).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .ggml_reference import BLOCK, OFFSET, quantize_blocks, quantize_residual, reference_dot
from .kernels import Kernels, cpu_features, default as default_kernels

# (values per block, bytes per block) as GGUF stores them
BLOCK_SIZE = {
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q8_0": (32, 34),
    "Q5_0": (32, 22),
    "Q4_K": (256, 144),
    "Q6_K": (256, 210),
}
FORMATS = {"Q4_0": 0, "Q4_1": 1, "Q8_0": 2, "Q5_0": 3, "Q4_K": 4, "Q6_K": 5}  # csrc/gguf_layout.h
PANEL = 32  # output channels per packed panel
DENSE_KINDS = tuple(FORMATS)  # the formats csrc/gguf_dequant.h writes back: all
# Rows from which a prompt chunk runs dequantised weights through torch's matmul (module doc), per
# (kernel variant, int8 activation passes). That road pays a dequantisation of the whole weight per
# chunk, the integer kernel a cost per row, so the dense road wins only where torch multiplies far
# faster than the kernel's int8 rows: AMX's bf16 tiles; elsewhere only against two passes' rows.
# `benchmarks/prefill.py --roads` measures both roads; the figures behind each threshold are in
# docs/benchmarks.md ("The prompt road under one activation pass").
NEVER = 1 << 62
PROMPT_ROWS = {
    ("amx", 1): 128,
    ("amx", 2): 128,
    ("vnni512", 1): NEVER,
    ("vnni512", 2): 256,
    ("avxvnni", 1): NEVER,
    ("avxvnni", 2): 256,
    ("avx2", 1): NEVER,
    ("avx2", 2): 256,
}


def prompt_rows(kernels: Kernels, passes: int = 2) -> int:
    """The row count from which a prompt chunk takes the dense road on these kernels."""
    return PROMPT_ROWS.get((kernels.w8a8_variant, passes), NEVER if passes == 1 else 256)


@dataclass
class Blocks:
    """A weight unpacked for the reference and the packer: q [N, K] int8, the integers the dot
    products use (Q4: 0..15, Q5_0: 0..31, Q8_0 and Q6_K: signed); d [N, K / 32] fp32 the
    block scale (K-quants: exact products of superblock and sub-block scales); m [N, K / 32]
    fp32 the block offset (Q4_1, Q4_K) or None; sub [N, K / 16] fp32, Q6_K's int8 16-block
    scales (then d is the superblock's); parts: the stored fields pack() lays out."""

    q: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor | None = None
    sub: torch.Tensor | None = None
    parts: dict | None = None


@dataclass
class GGUFWeight:
    """A [N, K] weight in a GGUF block format: raw holds its rows' bytes, as stored."""

    kind: str  # a key of BLOCK_SIZE
    raw: np.ndarray  # uint8 [N, K / values * bytes] (BLOCK_SIZE[kind])

    @property
    def shape(self) -> tuple[int, int]:
        n, row = self.raw.shape
        values, nbytes = BLOCK_SIZE[self.kind]
        return n, row // nbytes * values

    def permute_rows(self, fn) -> GGUFWeight:
        """The same weight with its rows rearranged by fn (an array op on axis 0)."""
        return GGUFWeight(self.kind, np.ascontiguousarray(fn(self.raw)))


def concat(parts: list[GGUFWeight]) -> GGUFWeight | None:
    """Rows of several weights stacked (fused q/k/v, gate/up); None if their formats differ."""
    if len({p.kind for p in parts}) != 1 or len({p.shape[1] for p in parts}) != 1:
        return None
    return GGUFWeight(parts[0].kind, np.concatenate([p.raw for p in parts], axis=0))


def unpack(w: GGUFWeight) -> Blocks:
    """The weight's stored integers and scales (Blocks), exactly as stored."""
    if w.kind in ("Q4_K", "Q6_K"):
        from .ggml_kquants import unpack_k

        return Blocks(**unpack_k(w.kind, w.raw))
    n, k = w.shape
    raw = torch.from_numpy(np.require(w.raw, requirements=["C", "W"])).view(
        n, k // BLOCK, BLOCK_SIZE[w.kind][1]
    )
    d16 = raw[..., :2].contiguous().view(torch.float16).squeeze(-1)
    parts = {"d": d16}
    if w.kind == "Q8_0":
        return Blocks(
            raw[..., 2:].contiguous().view(torch.int8).reshape(n, k), d16.float(), parts=parts
        )
    start = {"Q4_0": 2, "Q4_1": 4, "Q5_0": 6}[w.kind]
    qs = raw[..., start : start + 16]
    q = torch.cat([qs & 0x0F, qs >> 4], dim=-1)  # element j, j + 16
    if w.kind == "Q5_0":  # bit j of qh: element j's 16
        qh = raw[..., 2:6].contiguous().view(torch.int32)  # [n, nb, 1], little-endian
        q = q | (((qh >> torch.arange(32, dtype=torch.int32)) & 1) << 4).to(torch.uint8)
    m = None
    if w.kind == "Q4_1":
        parts["m"] = raw[..., 2:4].contiguous().view(torch.float16).squeeze(-1)
        m = parts["m"].float()
    return Blocks(q.view(torch.int8).reshape(n, k), d16.float(), m, parts=parts)


def dequantize(w: GGUFWeight, rows: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 values of the weight (or of its rows `rows`), as ggml defines them."""
    if rows is not None:
        w = GGUFWeight(w.kind, w.raw[rows.numpy()].reshape(-1, w.raw.shape[1]))
    u = unpack(w)
    n, k = w.shape
    if u.sub is not None:  # Q6_K: d * sc * q (exact in any order)
        scale = (u.d.repeat_interleave(2, dim=1) * u.sub).repeat_interleave(16, dim=1)
        return scale * u.q.float()
    q = u.q.float().view(n, k // BLOCK, BLOCK) - OFFSET.get(w.kind, 0)
    out = q * u.d.unsqueeze(-1)
    if u.m is not None:
        out = out + u.m.unsqueeze(-1)
    return out.view(n, k)


class EmbeddingRows:
    """A GGUF embedding table looked up by token id: rows dequantised on first use and kept, up
    to max_bytes of fp32 (then the kept ones are dropped and it starts over). Dequantising a
    row costs about as much as a decoder layer's Python on a one-row step; a conversation reuses
    few distinct tokens. The same function makes every row, so the bits do not depend on it."""

    def __init__(self, weight: GGUFWeight, max_bytes: int = 32 << 20):
        self.weight = weight
        self.max_rows = max(1, max_bytes // (4 * weight.shape[1]))
        self._rows: dict[int, torch.Tensor] = {}

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = tokens.tolist()
        rows = self._rows
        missing = sorted({t for t in ids if t not in rows})
        if missing:
            if len(rows) + len(missing) > self.max_rows:
                # start over with this call's rows: the ones kept before are needed too
                rows.clear()
                missing = sorted(set(ids))
            rows.update(zip(missing, dequantize(self.weight, torch.tensor(missing))))
        return torch.stack([rows[t] for t in ids])


def _panel_major(a: torch.Tensor, pad: int) -> torch.Tensor:
    """[N, X, ...] per-channel fields -> [panels, X, 32 channels, ...] (N padded with zeros)."""
    a = torch.nn.functional.pad(a, (0, 0) * (a.dim() - 2) + (0, 0, 0, pad))
    return a.view(-1, PANEL, *a.shape[1:]).transpose(1, 2)


def pack(w: GGUFWeight, u: Blocks | None = None, verify_copy: bool = False) -> torch.Tensor:
    """The kernel's layout (csrc/gguf.h): per 32-channel panel, per 32-block a record of the
    block's channel scales then 8 steps of U[4 * channel + feature] (Q4 nibbles two per byte,
    Q5_0 plus a bit plane, Q6_K plus a plane of 2-bit pairs, Q8_0 bytes); K-quants: every 8
    records led by their superblock's header. verify_copy (Q6_K): its verify copy, the same
    with each step's U as bytes (what several-row calls read: no unpacking). u: unpack(w)."""
    u = unpack(w) if u is None else u
    n, k = w.shape
    nb, pad = k // BLOCK, -n % PANEL
    q = u.q.view(torch.uint8)
    if w.kind == "Q6_K":
        q = (u.q + 32).view(torch.uint8)  # 0..63 for the u8 x s8 products
    # [P, 32 ch, B, 8 steps, 4 f] -> [P, B, 8, 32 ch, 4 f]: a step's 128 values channel-major
    steps = _panel_major(q.reshape(n, nb, 8, 4), pad).permute(0, 1, 3, 2, 4).reshape(-1, nb, 8, 128)
    if w.kind == "Q8_0" or verify_copy:
        data = steps.reshape(-1, nb, 1024)
    else:
        lo = steps & 0x0F
        nib = lo[..., :64] | (lo[..., 64:] << 4)  # channels 0-15 low nibbles, 16-31 high
        if w.kind == "Q5_0":  # bit i of 16 bytes: bit 4 of U[i]
            bits = ((steps >> 4) & 1).view(-1, nb, 8, 16, 8) << torch.arange(8, dtype=torch.uint8)
            data = torch.cat([nib, bits.sum(-1, dtype=torch.uint8)], -1).reshape(-1, nb, 640)
        elif w.kind == "Q6_K":  # byte i: bits 4-5 of U[i + 32 j] at 2j
            hi = ((steps >> 4) & 3).view(-1, nb, 8, 4, 32) << (
                2 * torch.arange(4, dtype=torch.uint8)
            ).view(4, 1)
            data = torch.cat(
                [nib.reshape(-1, nb, 512), hi.sum(-2, dtype=torch.uint8).reshape(-1, nb, 256)], -1
            )
        else:
            data = nib.reshape(-1, nb, 512)
    per_block = (
        [
            _panel_major(f, pad)
            .contiguous()
            .view(torch.uint8)
            .reshape(-1, nb, PANEL * f.element_size())
            for f in u.parts["record"]
        ]
        if "record" in u.parts
        else [
            _panel_major(u.parts[f], pad).contiguous().view(torch.uint8).reshape(-1, nb, 64)
            for f in ("d", "m")
            if f in u.parts
        ]
    )
    records = torch.cat([*per_block, data], -1)  # [P, nb, record]
    if "header" in u.parts:  # K-quants: [P, nb / 8, header | 8 records]
        head = [
            _panel_major(f, pad).contiguous().view(torch.uint8).reshape(-1, nb // 8, 64)
            for f in u.parts["header"]
        ]
        records = torch.cat([*head, records.reshape(-1, nb // 8, 8 * records.shape[-1])], -1)
    return records.contiguous().view(-1)


class GGUFLinear:
    """Drop-in for linear.Linear over a GGUFWeight: __call__(x [M, K], prompt) -> fp32 [M, N].

    prompt is accepted and ignored: the result is row-invariant for any number of rows.
    kernels: the compiled kernels to run (default: the process's); with none, the torch reference.
    residual: the second activation pass (module doc).
    """

    def __init__(
        self,
        weight: GGUFWeight,
        bias: torch.Tensor | None = None,
        kernels: Kernels | None = None,
        residual: bool = True,
    ):
        if weight.kind not in FORMATS:
            raise ValueError(f"no GGUF kernel for {weight.kind}; supported: {', '.join(FORMATS)}")
        self.kind = weight.kind
        self.out_features, self.in_features = n, k = weight.shape
        self.kernels = kernels or default_kernels()
        self.kernel = self.kernels.label if self.kernels.module is not None else "torch"
        self.bias = None if bias is None else bias.float().contiguous()
        self.passes = 2 if residual else 1
        # only the packed copy (or the reference's unpacked one) is kept: a fused weight's raw
        # bytes are a copy too, and a tied embedding looks its rows up in the file's own bytes
        self.copy: torch.Tensor | None = None
        u = unpack(weight)
        if self.kernels.module is not None:
            self.packed = pack(weight, u)
            # Q6_K's verify copy, 1.07 bytes a weight beside the packed 0.82, where the kernels
            # read it (calls of a few rows: csrc/gguf.h)
            if self.kind == "Q6_K" and self.kernels.module.gguf_copy_used(
                self.passes, self.kernels.w8a8_variant
            ):
                self.copy = pack(weight, u, verify_copy=True)
        else:
            w = BLOCK if u.sub is None else 16
            # [K / w, w, N]: one exact fp32 matmul per block (Q6_K: half-block) gives every row's
            # integer block sums
            self.wq = u.q.float().view(n, k // w, w).permute(1, 2, 0).contiguous()
            self.d = u.d.t().contiguous()
            self.m = None if u.m is None else u.m.t().contiguous()
            self.sub = None if u.sub is None else u.sub.t().contiguous()

    def __call__(self, x: torch.Tensor, prompt: bool = False) -> torch.Tensor:
        if prompt and self.dense and x.shape[0] >= prompt_rows(self.kernels, self.passes):
            return self._dense(x)
        return self._run(x, None, 0.0)

    def norm_linear(
        self, x: torch.Tensor, norm_weight: torch.Tensor, eps: float, prompt: bool = False
    ) -> torch.Tensor:
        """self(rms_norm(x, norm_weight, eps)), the norm fused into the activation quantisation
        (block quantisation is invariant to a per-row factor: 1/rms scales each dx)."""
        if prompt and self.dense and x.shape[0] >= prompt_rows(self.kernels, self.passes):
            return self._dense(F.rms_norm(x.float(), norm_weight.shape, norm_weight.float(), eps))
        return self._run(x, norm_weight.float(), eps)

    @property
    def dense(self) -> bool:
        return self.kernels.module is not None and self.kind in DENSE_KINDS

    def _dense(self, x: torch.Tensor) -> torch.Tensor:
        """A prompt chunk: the weight dequantised into the thread's scratch, then torch's matmul."""
        w = _scratch(self.out_features, self.in_features, dense_dtype())
        self.kernels.module.gguf_dequantize(self.packed, FORMATS[self.kind], self.out_features, w)
        return F.linear(
            x.to(w.dtype), w, None if self.bias is None else self.bias.to(w.dtype)
        ).float()

    def _run(self, x: torch.Tensor, norm: torch.Tensor | None, eps: float) -> torch.Tensor:
        if self.kernels.module is not None:
            if x.stride(-1) != 1 or x.dtype not in (torch.float32, torch.bfloat16):
                x = x.float().contiguous()
            return self.kernels.module.gguf_linear(
                x,
                self.packed,
                FORMATS[self.kind],
                self.out_features,
                self.passes,
                self.bias,
                norm,
                eps,
                variant=self.kernels.w8a8_variant,
                copy=self.copy,
            )
        x = x.float()
        r = None
        if norm is not None:
            r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            x = x * norm
        if self.passes == 2:
            q0, _, xs0, q, dx, xs = quantize_residual(x)
            second = (q0, xs0)
        else:
            q, dx, xs = quantize_blocks(x)
            second = None
        y = reference_dot(
            q, dx if r is None else dx * r, xs, self.wq, self.d, self.m, self.kind, self.sub, second
        )
        return y if self.bias is None else y + self.bias


@functools.cache
def dense_dtype() -> torch.dtype:
    """What prompt chunks multiply in: bf16 where the CPU has bf16 matmul instructions and torch
    may use them (ATEN_CPU_CAPABILITY / an AVX2 cap leaves oneDNN's bf16 matmul emulated, several
    times slower than fp32 FMAs)."""
    usable = torch.backends.cpu.get_cpu_capability().upper().startswith("AVX512")
    return (
        torch.bfloat16 if usable and {"amx_bf16", "avx512_bf16"} & cpu_features() else torch.float32
    )


_local = threading.local()  # one scratch per thread: forwards of two engines may overlap


def _scratch(n: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous [n, k] view of this thread's buffer, grown to the largest weight seen."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.numel() < n * k or buf.dtype != dtype:
        buf = _local.buf = torch.empty(
            max(n * k, 0 if buf is None or buf.dtype != dtype else buf.numel()), dtype=dtype
        )
    return buf[: n * k].view(n, k)
