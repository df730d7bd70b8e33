"""The GGUF loop on AMX tiles (csrc/gguf_amx.h): a call of up to 32 sub-rows gets tiles of its own
height, loaded when a call's height differs from the thread's last one, and the formats switch
to the tiles at their own row counts (gguf.h kGgufAmxRows). Every height, in a scrambled call
order (so that each call follows one of another height), must give each row the bits it has
alone, which runs on the VNNI register tiles."""

import numpy as np
import pytest
import torch

from gguf_checks import inputs
from paraspec.model import ggml
from paraspec.model import kernels as cpu_kernels

FORMATS = ["Q4_0", "Q4_1", "Q5_0", "Q8_0"]


def _amx() -> cpu_kernels.Kernels:
    k = next((k for k in cpu_kernels.runnable() if k.label == "avx512:amx"), None)
    if k is None:
        pytest.skip("the avx512:amx kernels do not run here")
    return k


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("residual", [True, False])
def test_every_tile_height_gives_the_one_row_bits(kind, residual):
    import gguf

    kernel = _amx()
    n, k = 70, 576  # 70: a padded panel; 18 blocks: a short last group
    w = np.random.default_rng(2).standard_normal((n, k)).astype(np.float32) * 0.05
    lin = ggml.GGUFLinear(
        ggml.GGUFWeight(kind, gguf.quants.quantize(w, gguf.GGMLQuantizationType[kind])),
        kernels=kernel,
        residual=residual,
    )
    x = inputs(48, k, seed=3)
    alone = torch.cat([lin(x[i : i + 1]) for i in range(len(x))])
    assert not alone.isnan().any()
    gen = torch.Generator().manual_seed(4)
    # 1..40 rows: 1..80 sub-rows, one or more passes
    for m in (torch.randperm(40, generator=gen) + 1).tolist():
        at = int(torch.randint(0, len(x) - m + 1, (1,), generator=gen))
        assert torch.equal(lin(x[at : at + m]), alone[at : at + m]), (m, at)
