"""GGUF K-quants Q4_K and Q6_K: their stored superblocks unpacked for ggml.py (reference and
packer), and a small quantiser of each (what the gguf package lacks; tests write tiny models with
it, and compare it with llama.cpp's own where llama-cpp-python is installed).

A superblock holds 256 values of one row, as ggml's block_q4_K / block_q6_K:
  Q4_K (144 bytes): d, dmin fp16 | 12 bytes of eight 6-bit (sc, mn) | 128 bytes of nibbles;
        value = (d * sc_j) * q - (dmin * mn_j), q in 0..15, j the 32-block
  Q6_K (210 bytes): 128 bytes low nibbles | 64 bytes of 2-bit highs | sixteen int8 sc | d fp16;
        value = d * sc_j * (q - 32), q in 0..63, j the 16-block
"""

from __future__ import annotations

import numpy as np
import torch

SUPER = 256


def _scale_min_k4(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[..., 12] packed 6-bit scales -> (sc, mn) [..., 8] (ggml's get_scale_min_k4)."""
    s = s.astype(np.uint8)
    lo, hi = s[..., 0:4], s[..., 4:8]
    sc = np.concatenate([lo & 63, (s[..., 8:12] & 0xF) | ((lo >> 6) << 4)], -1)
    mn = np.concatenate([hi & 63, (s[..., 8:12] >> 4) | ((hi >> 6) << 4)], -1)
    return sc, mn


def unpack_k(kind: str, raw: np.ndarray) -> dict:
    """A Q4_K / Q6_K weight's rows [N, bytes] -> the fields of ggml.Blocks (q, d, m, sub, parts),
    which ggml.unpack wraps: this module imports nothing of ggml.py, which imports it."""
    n = raw.shape[0]
    if kind == "Q4_K":
        b = raw.reshape(n, -1, 144)
        ns = b.shape[1]
        d16 = torch.from_numpy(b[..., 0:2].copy().view(np.float16)[..., 0])
        dmin16 = torch.from_numpy(b[..., 2:4].copy().view(np.float16)[..., 0])
        sc, mn = (torch.from_numpy(a) for a in _scale_min_k4(b[..., 4:16]))
        qs = torch.from_numpy(b[..., 16:].copy()).view(n, ns, 4, 32)  # pairs of 32-blocks
        q = torch.stack([qs & 0x0F, qs >> 4], 3).view(torch.int8).reshape(n, ns * SUPER)
        d = (d16.float()[..., None] * sc.float()).reshape(n, -1)  # exact
        m = -(dmin16.float()[..., None] * mn.float()).reshape(n, -1)  # exact
        return dict(
            q=q,
            d=d,
            m=m,
            parts={"header": [d16, dmin16], "record": [sc.reshape(n, -1), mn.reshape(n, -1)]},
        )
    if kind == "Q6_K":
        b = raw.reshape(n, -1, 210)
        ns = b.shape[1]
        ql = torch.from_numpy(b[..., 0:128].copy()).view(n, ns, 2, 2, 32)  # half, l // 32, l % 32
        qh = torch.from_numpy(b[..., 128:192].copy()).view(n, ns, 2, 1, 32)
        sc = torch.from_numpy(b[..., 192:208].copy().view(np.int8))  # [n, ns, 16]
        d16 = torch.from_numpy(b[..., 208:210].copy().view(np.float16)[..., 0])
        low = torch.cat([ql & 0x0F, ql >> 4], 3)  # [n, ns, 2, 4, 32]: quarter g
        high = (qh >> (2 * torch.arange(4, dtype=torch.uint8)).view(4, 1)) & 3
        q = ((low | (high << 4)).to(torch.int16) - 32).to(torch.int8).reshape(n, ns * SUPER)
        d = d16.float().repeat_interleave(8, dim=1)  # the superblock's, per 32-block
        sub = sc.float().reshape(n, -1)
        return dict(
            q=q,
            d=d,
            sub=sub,
            parts={
                "header": [d16],
                "record": [sc[..., 0::2].reshape(n, -1), sc[..., 1::2].reshape(n, -1)],
            },
        )
    raise ValueError(f"not a K-quant: {kind}")


def _fp16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16)


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """fp32 [N, K] (K a multiple of 256) -> Q4_K rows [N, K / 256 * 144]: per 32-block the
    range [min(0, x), max x] in 15 steps, the steps and mins in 6 bits of the superblock's."""
    n, k = w.shape
    x = w.astype(np.float32).reshape(n, k // SUPER, 8, 32)
    lo = np.minimum(x.min(-1), 0)
    step = (x.max(-1) - lo) / 15
    d = _fp16(step.max(-1) / 63)
    dmin = _fp16(-lo.min(-1) / 63)
    df, dmf = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.clip(
        np.round(np.divide(step, df[..., None], out=np.zeros_like(step), where=df[..., None] > 0)),
        0,
        63,
    )
    mn = np.clip(
        np.round(np.divide(-lo, dmf[..., None], out=np.zeros_like(lo), where=dmf[..., None] > 0)),
        0,
        63,
    )
    scale, offset = (df[..., None] * sc)[..., None], (dmf[..., None] * mn)[..., None]
    q = np.clip(
        np.round(np.divide(x + offset, scale, out=np.zeros_like(x), where=scale > 0)), 0, 15
    ).astype(np.uint8)
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    s = np.zeros((n, k // SUPER, 12), np.uint8)
    s[..., 0:4] = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    s[..., 4:8] = mn[..., :4] | ((mn[..., 4:] >> 4) << 6)
    s[..., 8:12] = (sc[..., 4:] & 0xF) | ((mn[..., 4:] & 0xF) << 4)
    qs = q.reshape(n, -1, 4, 2, 32)
    qs = qs[..., 0, :] | (qs[..., 1, :] << 4)  # block 2p low, 2p + 1 high
    out = np.concatenate(
        [d[..., None].view(np.uint8), dmin[..., None].view(np.uint8), s, qs.reshape(n, -1, 128)], -1
    )
    return np.ascontiguousarray(out.reshape(n, -1))


def quantize_q6_k(w: np.ndarray) -> np.ndarray:
    """fp32 [N, K] (K a multiple of 256) -> Q6_K rows [N, K / 256 * 210]: per 16-block the
    value of largest magnitude at -32 steps (as ggml), the steps in int8 of the superblock's."""
    n, k = w.shape
    x = w.astype(np.float32).reshape(n, k // SUPER, 16, 16)
    pick = np.take_along_axis(x, np.abs(x).argmax(-1)[..., None], -1)[..., 0]
    step = pick / -32
    amax_i = np.abs(step).argmax(-1)
    big = np.take_along_axis(step, amax_i[..., None], -1)[..., 0]
    d = _fp16(big / -128)  # that step -> -128
    df = d.astype(np.float32)
    sc = np.clip(
        np.round(np.divide(step, df[..., None], out=np.zeros_like(step), where=df[..., None] != 0)),
        -128,
        127,
    )
    scale = (df[..., None] * sc)[..., None]
    q = (
        np.clip(
            np.round(np.divide(x, scale, out=np.zeros_like(x), where=scale != 0)), -32, 31
        ).astype(np.int16)
        + 32
    )
    q = q.astype(np.uint8).reshape(n, -1, 2, 4, 32)  # half, quarter g, l
    ql = (q[:, :, :, 0:2] & 0x0F) | ((q[:, :, :, 2:4] & 0x0F) << 4)  # [n, ns, 2, 2, 32]
    qh = sum(((q[:, :, :, g] >> 4) & 3) << (2 * g) for g in range(4))  # [n, ns, 2, 32]
    out = np.concatenate(
        [
            ql.reshape(n, -1, 128),
            qh.astype(np.uint8).reshape(n, -1, 64),
            sc.astype(np.int8).view(np.uint8),
            d[..., None].view(np.uint8),
        ],
        -1,
    )
    return np.ascontiguousarray(out.reshape(n, -1))


QUANTIZERS = {"Q4_K": quantize_q4_k, "Q6_K": quantize_q6_k}
