"""The AVX2 kernels' wide GGUF tiles (csrc/gguf_wide.h: calls of 3 or more sub-rows, a verify step)
and vnni512's several row tiles per chunk of blocks (gguf.h: uneven chunks, each tile fetching a
share of the next) against their 1-row loop (gguf_loop.h), bit for bit: every row count 1..64 at
any place and 72 / 80 (one pass takes the wide tiles from 64 sub-rows: a prompt chunk's row
blocks, whole and partial), one pass or two, on random blocks whose values and scales reach every extreme, and on
rows whose int8 blocks are all +-127 (the largest int16 group sums the avx2 variant adds before
widening)."""

import numpy as np
import pytest
import torch

from gguf_checks import inputs
from paraspec.model import ggml
from paraspec.model import kernels as cpu_kernels

FORMATS = ["Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q4_K", "Q6_K"]
# bytes of a block before its values (Q6_K: after them, its fp16 d last)
SCALES = {
    "Q4_0": (0, 2),
    "Q4_1": (0, 4),
    "Q8_0": (0, 2),
    "Q5_0": (0, 2),
    "Q4_K": (0, 4),
    "Q6_K": (208, 210),
}


def _variants() -> list:
    runnable = {k.label: k for k in cpu_kernels.runnable()}
    return [
        pytest.param(
            runnable.get(label),
            id=label,
            marks=()
            if label in runnable
            else pytest.mark.skip(reason=f"{label} does not run here"),
        )
        for label in ("avx2:avx2", "avx2:avxvnni", "avx512:vnni512")
    ]


def _weight(kind: str, n: int, k: int, seed: int = 0) -> ggml.GGUFWeight:
    """Random block bytes with small finite fp16 scales; every 4th output channel all 0xFF
    elsewhere: the largest unsigned values (15, 31, 63) in every step."""
    rng = np.random.default_rng(seed)
    values, nbytes = ggml.BLOCK_SIZE[kind]
    raw = rng.integers(0, 256, (n, k // values, nbytes), dtype=np.uint8)
    a, b = SCALES[kind]
    full = np.ones(nbytes, bool)
    full[a:b] = False
    raw[::4, :, full] = 0xFF
    for at in range(a, b, 2):
        raw[..., at : at + 2] = (
            (rng.random((n, k // values, 1)) * 0.01).astype(np.float16).view(np.uint8)
        )
    return ggml.GGUFWeight(kind, raw.reshape(n, -1))


def _rows(k: int) -> torch.Tensor:
    """80 rows: inputs()' mix of magnitudes, then rows of +-1 per block (every int8 +-127)."""
    x = inputs(80, k)
    sign = torch.where(torch.arange(k // 32) % 3 == 0, -1.0, 1.0).repeat_interleave(32)
    for i, r in enumerate(range(3, 80, 9)):
        x[r] = sign * (i + 1) if i % 2 else torch.full((k,), -2.0 - i)
    return x


@pytest.mark.parametrize("kernel", _variants())
@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("k", [1536, 1280])
def test_wide_tiles_give_the_one_row_bits(kernel, kind, residual, k):
    # 1536: 48 blocks, three chunks of the L1 buffer; 1280: 40 blocks, uneven chunks (vnni512: 14,
    # 14, 12 or, whole superblocks, 16, 16, 8)
    # 70: a padded panel
    lin = ggml.GGUFLinear(_weight(kind, 70, k), kernels=kernel, residual=residual)
    x = _rows(k)
    alone = torch.cat([lin(x[i : i + 1]) for i in range(len(x))])
    assert not alone.isnan().any()
    gen = torch.Generator().manual_seed(1)
    for m in [*range(1, 65), 72, 80]:
        at = int(torch.randint(0, len(x) - m + 1, (1,), generator=gen))
        assert torch.equal(lin(x[at : at + m]), alone[at : at + m]), (m, at)
    rows = torch.randperm(len(x), generator=gen)[:37]  # scattered rows, an odd count
    assert torch.equal(lin(x[rows]), alone[rows])
