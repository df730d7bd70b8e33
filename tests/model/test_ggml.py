"""GGUF block-quantised linears (paraspec.model.ggml, csrc/gguf.h): Q4_0, Q4_1 and Q8_0 weights
made by the gguf package's own quantiser; every kernel path against the torch reference, bit for
bit; row invariance; tiny GGUF models decoding in parallel exactly as AR."""

import logging

import numpy as np
import pytest
import torch

from gguf_checks import (
    PLUGINS,
    assert_gguf_model_lossless,
    assert_kernel_is_reference,
    assert_rows_independent,
    inputs,
)
from kernel_paths import per_isa, per_variant
from paraspec import LLM, SamplingParams
from paraspec.errors import ConfigError
from paraspec.model import ggml
from paraspec.model import kernels as cpu_kernels
from paraspec.model.linear import rms_norm
from tiny_models import write_gguf

# what the gguf package quantises (K-quants: test_ggml_kquants.py)
FORMATS = [
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q8_0",
]
KERNELS = per_variant()  # every compiled inner loop this CPU runs, and torch


def _weight(kind: str, n: int, k: int, seed: int = 0) -> tuple[ggml.GGUFWeight, np.ndarray]:
    import gguf

    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32) * 0.05
    w[:, 5] *= 8  # an outlier column, as real weights have
    return ggml.GGUFWeight(kind, gguf.quants.quantize(w, gguf.GGMLQuantizationType[kind])), w


@pytest.mark.parametrize("kind", FORMATS)
def test_dequantize_matches_gguf_package(kind):
    import gguf

    w, _ = _weight(kind, 40, 96)
    ref = gguf.quants.dequantize(w.raw, gguf.GGMLQuantizationType[kind])
    assert np.array_equal(ggml.dequantize(w).numpy(), ref)
    rows = torch.tensor([3, 0, 39, 3])
    assert torch.equal(ggml.dequantize(w, rows), torch.from_numpy(ref)[rows])


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize(
    "n,k", [(70, 96), (259, 64), (32, 160)]
)  # n not a multiple of 32: padded panels
def test_kernel_gives_the_torch_references_bits(kernel, kind, residual, n, k):
    w, _ = _weight(kind, n, k)
    assert_kernel_is_reference(w, kernel, residual)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kind", FORMATS)
def test_row_output_independent_of_other_rows(kernel, kind):
    """A row's bits alone, among 1..64 rows, at any place, and on one thread or two."""
    w, _ = _weight(kind, 100, 128, seed=1)
    lin = ggml.GGUFLinear(w, kernels=kernel)
    x = inputs(80, 128)
    full = assert_rows_independent(lin, x)  # 80 rows: two row blocks
    # shorter prompt chunks keep the integer kernel (taller: test_gguf_prompt.py)
    short = min(ggml.prompt_rows(kernel), 80) - 1
    assert torch.equal(lin(x[:short], prompt=True), full[:short])


@pytest.mark.parametrize("kind", FORMATS)
def test_two_passes_combine_in_int32_before_one_float_step(kind):
    """The two-pass bits, element by element in Python integers and numpy fp32 scalars (module
    doc): per block I = 256 (isum_0 - c xs_0) + (isum_1 - c xs_1), xs = 256 xs_0 + xs_1, then one
    float step on dx1 = dx0 / 256. The reference (and so every kernel, tested above) gives them."""
    w, _ = _weight(kind, 32, 64, seed=2)
    x = inputs(3, 64, seed=3)
    q0, dx0, xs0, q1, dx1, xs1 = ggml.quantize_residual(x)
    assert torch.equal(dx1, dx0 / 256) and torch.equal(
        xs1, q1.view(3, 2, 32).sum(-1, dtype=torch.int32)
    )
    u = ggml.unpack(w)
    c = ggml.OFFSET.get(kind, 0)
    f32 = np.float32
    got = ggml.GGUFLinear(w, kernels=cpu_kernels.TORCH)(x)
    for r in range(3):
        for n in range(32):
            acc = f32(0)
            for b in range(2):
                wq = [int(v) for v in u.q[n, 32 * b : 32 * b + 32]]
                s0 = sum(a * int(q) for a, q in zip(wq, q0[r, 32 * b : 32 * b + 32])) - c * int(
                    xs0[r, b]
                )
                s1 = sum(a * int(q) for a, q in zip(wq, q1[r, 32 * b : 32 * b + 32])) - c * int(
                    xs1[r, b]
                )
                big, xs = 256 * s0 + s1, 256 * int(xs0[r, b]) + int(xs1[r, b])
                d, dx = f32(u.d[n, b]), f32(dx1[r, b])
                t = f32(big) * (d * dx)
                if u.m is not None:
                    t = t + f32(u.m[n, b]) * (dx * f32(xs))
                acc = acc + t
            assert acc == f32(got[r, n]), (r, n)


def test_residual_pass_is_clamped_to_127():
    """A residual just under half a step rounds to 128 on dx0 / 256: clamped to 127, on every kernel."""
    x = torch.zeros(2, 64)
    x[:, 0], x[:, 1], x[0, 2], x[1, 2] = 127.0, 0.4995, -0.4995, 0.25
    q0, dx0, _, q1, _, _ = ggml.quantize_residual(x)
    assert q0[0, 1] == 0 and float(x[0, 1] - q0[0, 1] * dx0[0, 0]) * 256 / float(dx0[0, 0]) > 127.5
    assert q1[0, 1] == 127 and q1[0, 2] == -127 and q1[1, 2] == 64
    w, _ = _weight("Q4_1", 32, 64)
    ref = ggml.GGUFLinear(w, kernels=cpu_kernels.TORCH)(x)
    for k in cpu_kernels.runnable():
        assert torch.equal(ggml.GGUFLinear(w, kernels=k)(x), ref), k.label


@pytest.mark.parametrize("kernel", KERNELS)
def test_norm_linear_fuses_rms_norm(kernel):
    w, _ = _weight("Q4_1", 64, 96)
    lin = ggml.GGUFLinear(w, kernels=kernel)
    x, g = inputs(12, 96), torch.rand(96) + 0.5
    fused = lin.norm_linear(x, g, 1e-6)
    assert torch.allclose(fused, lin(rms_norm(x, g, 1e-6)), rtol=1e-4, atol=1e-4)
    assert torch.equal(
        torch.cat([lin.norm_linear(x[i : i + 1], g, 1e-6) for i in range(12)]), fused
    )


@pytest.mark.parametrize(
    "kernels", [k for k in cpu_kernels.runnable() if k.module is not None], ids=str
)
def test_unknown_variant_is_refused(kernels):
    lin = ggml.GGUFLinear(_weight("Q8_0", 32, 64)[0], kernels=kernels)
    for op in ("gguf_linear", "w8a8_linear"):
        with pytest.raises(RuntimeError, match=f"{op}: variant 'nope' is not one this CPU runs"):
            if op == "gguf_linear":
                kernels.module.gguf_linear(
                    torch.zeros(1, 64), lin.packed, ggml.FORMATS["Q8_0"], 32, 2, variant="nope"
                )
            else:
                kernels.module.w8a8_linear(
                    torch.zeros(1, 64),
                    torch.zeros(0, dtype=torch.int8),
                    torch.zeros(0, dtype=torch.int32),
                    torch.zeros(0),
                    None,
                    32,
                    1,
                    variant="nope",
                )


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="no GGUF kernel for Q5_1"):
        ggml.GGUFLinear(ggml.GGUFWeight("Q5_1", np.zeros((1, 24), np.uint8)))


# --------------------------------------------------------------------------------- model level


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_dir, tmp_path_factory):
    """tiny_gguf(kind, arch) -> a tiny model written as a .gguf with its matmuls in `kind`."""
    out = {}

    def make(kind: str, arch: str = "llama"):
        if (kind, arch) not in out:
            hf = tiny_model_dir(arch, n_layers=3, hidden=96, heads=6, kv_heads=2)
            out[kind, arch] = write_gguf(
                hf, tmp_path_factory.mktemp("gguf") / f"m-{arch}-{kind}.gguf", kind
            )
        return out[kind, arch]

    return make


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize(
    "kind,arch", [(f, "llama") for f in FORMATS] + [("Q4_0", "qwen2")]
)  # qwen2: q/k/v biases
def test_gguf_model_verify_equals_autoregressive(tiny_gguf, kind, arch, kernels):
    """Logits of a token fed one per step equal its logits inside one 11-token forward; the
    model is close to the fp32 dequantisation of the same file."""
    lm, _ = assert_gguf_model_lossless(tiny_gguf(kind, arch), kernels)
    assert isinstance(lm.weights["layers.0.wqkv"], ggml.GGUFWeight)


@pytest.mark.parametrize("kernels", per_isa())
def test_gguf_llm_parallel_decoding_identical(tiny_gguf, kernels):
    """Through the public API, quantization "gguf": every drafter's greedy output is AR's."""
    from drafters import RandomTreeDrafter

    llm = LLM(str(tiny_gguf("Q4_1")), quantization="gguf", kernels=kernels.label)
    assert llm.config.quantization == "gguf"
    prompts = ["hello world", "aaaa bbbb aaaa bbbb aaaa", "1, 2, 3, 4,"]
    if kernels.module is None:  # the torch reference of the integer steps is slow: two prompts
        prompts = prompts[:2]
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    ar = llm.generate(prompts, params)
    # torch: one drafter suffices
    for plugin in PLUGINS if kernels.module is not None else PLUGINS[:1]:
        assert [o.token_ids for o in llm.generate(prompts, params, plugin_params=plugin)] == [
            o.token_ids for o in ar
        ]
    llm.engine.default_drafter = RandomTreeDrafter(llm.model.args.vocab_size, 9, seed=3)
    assert [o.token_ids for o in llm.generate(prompts, params)] == [o.token_ids for o in ar]


def test_gguf_is_the_default_for_gguf_files_with_kernels(tiny_gguf, tiny_model_dir):
    llm = LLM(str(tiny_gguf("Q8_0")))
    expected = "gguf" if llm.kernels.module is not None else None
    assert llm.config.quantization == expected or (
        expected is None and llm.config.quantization != "gguf"
    )
    # dequantised, as before
    assert LLM(str(tiny_gguf("Q8_0")), dtype="float32").config.quantization is None
    with pytest.raises(ConfigError, match="not a .gguf file") as e:
        LLM(str(tiny_model_dir("llama")), quantization="gguf")
    assert "\n" not in str(e.value)


def test_resolve_numerics_for_gguf_files():
    fake = cpu_kernels.Kernels("avx2", module=object(), w8a8_variant="avx2")
    pair = lambda n: (n.dtype, n.quantization)  # noqa: E731
    assert pair(cpu_kernels.resolve_numerics("auto", "auto", fake, gguf_file=True)) == (
        "bfloat16",
        "gguf",
    )
    assert pair(cpu_kernels.resolve_numerics("auto", "auto", fake)) == ("bfloat16", "w8a8")
    assert pair(
        cpu_kernels.resolve_numerics("auto", "auto", cpu_kernels.TORCH, gguf_file=True)
    ) == ("bfloat16", None)
    assert pair(cpu_kernels.resolve_numerics("float32", "auto", fake, gguf_file=True)) == (
        "float32",
        None,
    )
    assert pair(
        cpu_kernels.resolve_numerics("auto", "gguf", cpu_kernels.TORCH, gguf_file=True)
    ) == ("bfloat16", "gguf")
    with pytest.raises(ConfigError, match="not a .gguf file"):
        cpu_kernels.resolve_numerics("auto", "gguf", fake)


def test_file_without_supported_blocks(tiny_gguf, caplog):
    """An F16 file: auto falls back to the CPU's default numerics; asking for gguf is one line."""
    with caplog.at_level(logging.INFO, logger="paraspec.loader"):
        llm = LLM(str(tiny_gguf("F16")))
    assert llm.config.quantization != "gguf"
    if llm.kernels.module is not None:  # (on the torch path auto never tries a file's blocks)
        assert any("no GGUF kernel for F16" in r.message for r in caplog.records)
    with pytest.raises(ConfigError, match="no Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K weights") as e:
        LLM(str(tiny_gguf("F16")), quantization="gguf")
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------- activation passes


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize("passes", [1, 2])
def test_either_activation_passes_keeps_parallel_decoding_identical(tiny_gguf, kernels, passes):
    """One int8 pass (llama.cpp's numerics) or two: every linear runs what was asked, and greedy
    parallel decoding is AR's token for token under each."""
    from drafters import RandomTreeDrafter

    llm = LLM(
        str(tiny_gguf("Q4_1")), quantization="gguf", kernels=kernels.label, activation_passes=passes
    )
    m = llm.model
    linears = [m.lm_head] + [
        lin for layer in m.layers for lin in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down)
    ]
    assert m.activation_passes == passes and {lin.passes for lin in linears} == {passes}
    prompts = ["hello world", "aaaa bbbb aaaa bbbb aaaa"]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    ar = [o.token_ids for o in llm.generate(prompts, params)]
    assert [o.token_ids for o in llm.generate(prompts, params, plugin_params=PLUGINS[-1])] == ar
    llm.engine.default_drafter = RandomTreeDrafter(llm.model.args.vocab_size, 9, seed=5)
    assert [o.token_ids for o in llm.generate(prompts, params)] == ar


def test_activation_passes_auto_is_one_pass_for_gguf_blocks_on_the_kernels():
    plain = cpu_kernels.Kernels("avx2", module=object(), w8a8_variant="avx2")
    vnni = cpu_kernels.Kernels("avx2", module=object(), w8a8_variant="avxvnni")
    avx512 = cpu_kernels.Kernels("avx512", module=object(), w8a8_variant="vnni512")
    amx = cpu_kernels.Kernels("avx512", module=object(), w8a8_variant="amx")
    resolve = cpu_kernels.resolve_activation_passes
    assert [resolve("auto", k, "gguf") for k in (plain, vnni, avx512, amx)] == [1, 1, 1, 1]
    assert resolve("auto", cpu_kernels.TORCH, "gguf") == 2  # the torch reference
    assert resolve("auto", avx512, "w8a8") == 2  # one scale a row: its one pass costs quality
    assert resolve(2, plain, "gguf") == 2 and resolve("1", avx512, "w8a8") == 1


@pytest.mark.parametrize("bad", [0, 3, "two", True])
def test_bad_activation_passes_is_one_line_naming_the_field(tiny_gguf, bad):
    with pytest.raises(ConfigError, match="activation_passes") as e:
        LLM(str(tiny_gguf("Q4_1")), activation_passes=bad)
    assert "\n" not in str(e.value)
