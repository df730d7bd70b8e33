"""W8A8 linears (paraspec.model.quant): row invariance, error bounds, zero rows, GGUF Q8_0 import."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gguf_checks import verify_equals_steps
from kernel_paths import RUNNABLE, per_isa, per_variant
from paraspec.model import kernels as cpu_kernels
from paraspec.model.loader import load_model
from paraspec.model.quant import Int8Linear, q8_0_to_int8, quantize_rows, quantize_weight
from paraspec.model.transformer import Transformer

KERNELS = per_variant()  # every W8A8 inner loop this CPU runs, and the torch path (int_dot)
RESIDUAL = [True, False]


def _inputs(m: int, k: int, seed: int = 0) -> torch.Tensor:
    """Rows of very different magnitudes, with outlier channels: what per-row scales are for."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-3, 3, m)[:, None]
    x[:, ::37] *= 20
    return x


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("residual", RESIDUAL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n,k", [(96, 64), (67, 45), (960, 576)])  # odd shapes hit the pad paths
def test_row_output_independent_of_other_rows(kernel, residual, dtype, n, k):
    lin = Int8Linear.from_float(
        torch.randn(n, k) * 0.05, torch.randn(n), kernels=kernel, residual=residual
    )
    x = _inputs(30, k).to(dtype)
    full = lin(x)
    assert full.shape == (30, n) and full.dtype == torch.float32
    alone = torch.cat([lin(x[i : i + 1]) for i in range(30)])
    assert torch.equal(full, alone)  # 1 row vs among 30
    for rows in (torch.arange(16), torch.arange(29, 13, -1), torch.randperm(30)[:16]):
        assert torch.equal(lin(x[rows]), full[rows])  # among 16, at other indices
    assert torch.equal(lin(x, prompt=True), full)  # prompts take the same kernel


@pytest.mark.parametrize("kernel", KERNELS)
def test_output_independent_of_thread_count_and_prefill_blocking(kernel):
    lin = Int8Linear.from_float(torch.randn(200, 96) * 0.05, kernels=kernel)
    x = _inputs(300, 96)  # > 256 sub-rows: row blocks
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = lin(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(lin(x), one)
    assert torch.equal(lin(x[250:260]), one[250:260])


@pytest.mark.parametrize("residual", RESIDUAL)
def test_every_kernel_gives_the_torch_fallbacks_bits(residual):
    """Exact int32 sums and one op-for-op epilogue: every W8A8 path this CPU runs (AVX512-VNNI,
    AVX-VNNI, AVX2, torch int_dot) gives the same bits, so an AVX2 machine's w8a8 output is an
    AVX-512 machine's."""
    w, b = torch.randn(200, 136), torch.randn(200)
    ref = Int8Linear.from_float(w, b, kernels=cpu_kernels.TORCH, residual=residual)
    for k in RUNNABLE:
        lin = Int8Linear.from_float(w, b, kernels=k, residual=residual)
        for m in (1, 4, 9, 33):
            x = _inputs(m, 136, seed=m)
            assert torch.equal(lin(x), ref(x)), k.label
            assert torch.equal(lin(x.bfloat16()), ref(x.bfloat16())), k.label


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("residual", RESIDUAL)
def test_fused_rms_norm(kernel, residual):
    """norm_linear(x, g, eps) = lin(rms_norm(x, g, eps)) up to rounding, and is row-invariant."""
    lin = Int8Linear.from_float(
        torch.randn(96, 72) * 0.05, torch.randn(96), kernels=kernel, residual=residual
    )
    g = torch.rand(72) + 0.5
    x = _inputs(20, 72)
    x[4] = 0
    fused = lin.norm_linear(x, g, 1e-5)
    want = lin(F.rms_norm(x, (72,), g, 1e-5))
    assert ((fused - want).abs() <= 1e-5 * want.abs().max()).all()
    assert torch.equal(
        torch.cat([lin.norm_linear(x[i : i + 1], g, 1e-5) for i in range(20)]), fused
    )
    assert torch.equal(fused[4], lin.bias)


def test_weight_quantisation_bounds():
    w = torch.randn(300, 200) * torch.logspace(-4, 1, 300)[:, None]
    w[7] = 0
    q, s = quantize_weight(w)
    assert q.dtype == torch.int8 and q.abs().max() <= 127
    assert s[7] == 0 and (q[7] == 0).all()
    nz = torch.arange(300) != 7
    assert (q[nz].abs().amax(1) == 127).all()  # the full int8 range is used
    err = (q.float() * s[:, None] - w).abs()
    assert (err <= s[:, None] / 2 * (1 + 1e-5)).all()  # half a step per channel


@pytest.mark.parametrize("residual", RESIDUAL)
@pytest.mark.parametrize("kernel", KERNELS)
def test_output_error_within_the_analytic_bound(kernel, residual):
    """|y - x W^T| <= sum_k |x| dw + dx |w| + dx dw, with dw = sw/2 and dx = the last pass's
    step/2 (a residual pass quantises what the first one rounded away)."""
    w, x = torch.randn(128, 256) * 0.05, _inputs(12, 256)
    lin = Int8Linear.from_float(w, kernels=kernel, residual=residual)
    _, sw = quantize_weight(w)
    q, sx = quantize_rows(x)
    if residual:
        _, sx = quantize_rows(x - q.float() * sx)
    dw, dx = sw[None, :] / 2, sx / 2  # [1, N], [M, 1]
    bound = x.abs().sum(1, keepdim=True) * dw + dx * w.abs().sum(1)[None, :] + dx * dw * 256
    ref = x.double() @ w.double().t()
    assert ((lin(x).double() - ref).abs() <= bound * 1.001 + 1e-6 * ref.abs()).all()


def test_residual_pass_cuts_the_error():
    w, x = torch.randn(256, 512) * 0.05, _inputs(8, 512)
    ref = x @ w.t()
    q, s = quantize_weight(w)
    exact_w = F.linear(x, q.float() * s[:, None])  # the int8 weights, unquantised x

    def rel(y, r):
        return ((y - r).norm(dim=1) / r.norm(dim=1)).max().item()

    one = Int8Linear.from_float(w, residual=False)(x)
    two = Int8Linear.from_float(w, residual=True)(x)
    assert rel(one, ref) < 0.05  # outlier channels: a few %
    assert rel(two, exact_w) < rel(one, exact_w) / 50  # activation error nearly gone
    assert rel(two, ref) < 0.01  # what is left is the weights'


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("residual", RESIDUAL)
def test_zero_rows_give_the_bias_and_leave_others_alone(kernel, residual):
    w, b = torch.randn(40, 24), torch.randn(40)
    lin = Int8Linear.from_float(w, b, kernels=kernel, residual=residual)
    x = torch.randn(5, 24)
    x[[1, 3]] = 0
    y = lin(x)
    assert torch.equal(y[1], b) and torch.equal(y[3], b)
    assert torch.isfinite(y).all()
    assert torch.equal(y[[0, 2, 4]], lin(x[[0, 2, 4]]))
    assert torch.equal(
        Int8Linear.from_float(w, kernels=kernel, residual=residual)(torch.zeros(3, 24)),
        torch.zeros(3, 40),
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_zero_weight_channel_and_empty_input(kernel):
    w = torch.randn(33, 20)
    w[5] = 0
    lin = Int8Linear.from_float(w, kernels=kernel)
    y = lin(torch.randn(4, 20))
    assert (y[:, 5] == 0).all() and torch.isfinite(y).all()
    assert lin(torch.zeros(0, 20)).shape == (0, 33)


@pytest.mark.parametrize("kernel", KERNELS)
def test_weight_rows_dequantise_the_packed_weight(kernel):
    w = torch.randn(70, 36)
    lin = Int8Linear.from_float(w, kernels=kernel)
    q, s = quantize_weight(w)
    idx = torch.tensor([0, 69, 31, 32, 5, 5])
    assert torch.equal(lin.weight_rows(idx), q[idx].float() * s[idx, None])


# --------------------------------------------------------------------------- GGUF Q8_0


def _q8_0(w: torch.Tensor) -> np.ndarray:
    gguf = pytest.importorskip("gguf")
    return gguf.quants.quantize(w.numpy(), gguf.GGMLQuantizationType.Q8_0)


def _dequant(raw: np.ndarray) -> torch.Tensor:
    import gguf

    return torch.from_numpy(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0).copy())


def test_q8_0_import_requantises_per_channel():
    # block scales differ
    w = torch.randn(48, 128) * torch.linspace(0.1, 2, 4).repeat_interleave(32)[None, :]
    raw = _q8_0(w)
    assert raw.dtype == np.uint8 and raw.shape == (48, 128 // 32 * 34)
    deq = _dequant(raw)
    q, s = q8_0_to_int8(raw, (48, 128))
    # same as quantising the dequantised (exact in fp32) values per channel: no bf16 detour
    q_ref, s_ref = quantize_weight(deq)
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
    # the block with the largest scale keeps its Q8_0 int8 values exactly
    blocks = torch.from_numpy(raw.reshape(48, 4, 34).copy())
    d = blocks[..., :2].contiguous().view(torch.float16).squeeze(-1)  # [48, 4]
    qs = blocks[..., 2:].contiguous().view(torch.int8)  # [48, 4, 32]
    top = d.float().abs().argmax(1)
    assert torch.equal(q.view(48, 4, 32)[torch.arange(48), top], qs[torch.arange(48), top])
    assert ((q.float() * s[:, None] - deq).abs() <= s[:, None] / 2 * (1 + 1e-5)).all()


@pytest.mark.parametrize("kernel", KERNELS)
def test_q8_0_linear_matches_dequantised_weights(kernel):
    w, b = torch.randn(64, 96) * 0.1, torch.randn(64)
    raw = _q8_0(w)
    lin = Int8Linear.from_q8_0(raw, (64, 96), b, kernels=kernel)
    x = torch.randn(6, 96)
    ref = F.linear(x, _dequant(raw), b)
    assert ((lin(x) - ref).norm() / ref.norm()) < 0.01
    fused = Int8Linear.from_q8_0(np.concatenate([raw[:40], raw[40:]]), (64, 96), b, kernels=kernel)
    assert torch.equal(fused(x), lin(x))  # row blocks concatenate as is (qkv)


@pytest.mark.parametrize("k", [64, 1024, 1536])
def test_int_dot_is_exact_at_full_scale(k):
    """The torch path's int8 dot products equal exact integer arithmetic with every value at
    +-127 (where int16 pair sums saturate: torch._int_mm on CPUs without VNNI got this wrong by
    up to 1e5) and over more than one K_CHUNK."""
    from paraspec.model.quant import int_dot

    g = torch.Generator().manual_seed(k)
    q = (torch.randint(0, 2, (5, k), generator=g) * 254 - 127).to(torch.int8)
    w = torch.randint(-127, 128, (k, 40), generator=g, dtype=torch.int8)
    w[:, 0] = 127  # a column of extreme sums
    want = q.double() @ w.double()
    assert torch.equal(int_dot(q, w.float()), want.float())  # int32 -> fp32, as the kernels do


def test_q8_0_rejects_ragged_rows():
    with pytest.raises(ValueError, match="divisible"):
        q8_0_to_int8(np.zeros((2, 34), np.uint8), (2, 33))


# --------------------------------------------------------------------------- model level


def test_torch_kernels_run_int_dot():
    assert Int8Linear.from_float(torch.randn(8, 8), kernels=cpu_kernels.TORCH).kernel == "int_dot"


def _w8a8_model(path, kernels) -> Transformer:
    lm = load_model(path, torch.float32)
    return Transformer(lm.args, lm.weights, torch.float32, quantization="w8a8", kernels=kernels)


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_w8a8_model_verify_equals_autoregressive(tiny_model_dir, arch, kernels):
    """Lossless verification with W8A8 linears: the logits of a token fed one per step equal
    its logits inside one 11-token forward (what verifying a draft computes)."""
    verify_equals_steps(_w8a8_model(tiny_model_dir(arch), kernels))
