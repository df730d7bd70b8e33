"""Q6_K's verify copy (csrc/gguf.h, ggml.py pack(verify_copy=True)): made where the kernels read it
(AVX2's one-pass loop), 1088 bytes per 32 channels x 32-block record plus the header, and every
row count's bits the same with it as without it (the packed stream), rows with all int8 +-127 and
weights of 63 included (the largest int16 pair sums)."""

import numpy as np
import pytest
import torch

from gguf_checks import inputs
from paraspec.model import ggml
from paraspec.model import kernels as cpu_kernels


def _weight(n: int, k: int) -> ggml.GGUFWeight:
    """Random Q6_K blocks (small finite fp16 d, last two bytes), every 3rd channel all 0xFF elsewhere:
    value 63 in every step and scale -1."""
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (n, k // 256, 210), dtype=np.uint8)
    raw[::3, :, :208] = 0xFF
    raw[..., 208:] = (rng.random((n, k // 256, 1)) * 0.01).astype(np.float16).view(np.uint8)
    return ggml.GGUFWeight("Q6_K", raw.reshape(n, -1))


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize(
    "kernel", [k for k in cpu_kernels.runnable() if k.module is not None], ids=lambda k: k.label
)
def test_copy_where_read_and_bits_unchanged(kernel, residual):
    n, k = 70, 512
    lin = ggml.GGUFLinear(_weight(n, k), kernels=kernel, residual=residual)
    assert (lin.copy is not None) == kernel.module.gguf_copy_used(lin.passes, kernel.w8a8_variant)
    if lin.copy is None:
        return
    assert lin.copy.numel() == 3 * (k // 256) * (64 + 8 * 1088)  # 3 panels of 32 channels
    x = inputs(20, k)
    x[5] = torch.where(torch.arange(k) % 64 < 32, 1.0, -1.0)  # int8 +-127 in every block
    x[6] = 1.0
    copy = lin.copy
    for m in range(1, 21):
        with_copy = lin(x[:m])
        lin.copy = None
        packed = lin(x[:m])
        lin.copy = copy
        assert torch.equal(with_copy, packed), m
