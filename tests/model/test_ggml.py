"""GGUF block-quantised linears (paraspec.model.ggml, csrc/gguf.h): Q4_0, Q4_1 and Q8_0 weights
made by the gguf package's own quantiser; every kernel path against the torch reference, bit for
bit; row invariance; tiny GGUF models decoding in parallel exactly as AR."""
import logging

import numpy as np
import pytest
import torch

from kernel_paths import per_isa, per_variant
from paraspec import LLM, SamplingParams
from paraspec.errors import ConfigError
from paraspec.model import ggml
from paraspec.model import kernels as cpu_kernels
from paraspec.model.loader import load_model
from paraspec.model.transformer import SeqInput, Transformer, rms_norm
from tiny_models import write_gguf

FORMATS = ["Q4_0", "Q4_1", "Q5_0", "Q8_0"]   # what the gguf package quantises (K-quants: test_ggml_kquants.py)
KERNELS = per_variant()               # every compiled inner loop this CPU runs, and torch


def _weight(kind: str, n: int, k: int, seed: int = 0) -> tuple[ggml.GGUFWeight, np.ndarray]:
    import gguf
    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32) * 0.05
    w[:, 5] *= 8                                                   # an outlier column, as real weights have
    return ggml.GGUFWeight(kind, gguf.quants.quantize(w, gguf.GGMLQuantizationType[kind])), w


def _inputs(m: int, k: int, seed: int = 0) -> torch.Tensor:
    """Rows of very different magnitudes with outlier channels; one all-zero block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-3, 3, m)[:, None]
    x[:, ::37] *= 20
    x[0, :32] = 0
    return x


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
@pytest.mark.parametrize("n,k", [(70, 96), (259, 64), (32, 160)])   # n not a multiple of 32: padded panels
def test_kernel_gives_the_torch_references_bits(kernel, kind, residual, n, k):
    w, _ = _weight(kind, n, k)
    bias = torch.randn(n)
    ref = ggml.GGUFLinear(w, bias, kernels=cpu_kernels.TORCH, residual=residual)
    lin = ggml.GGUFLinear(w, bias, kernels=kernel, residual=residual)
    x = _inputs(21, k)
    y = lin(x)
    assert y.shape == (21, n) and y.dtype == torch.float32
    assert torch.equal(y, ref(x))
    xb = x.bfloat16()
    assert torch.equal(lin(xb), ref(xb.float()))                   # bf16 rows widen exactly
    # and it is the model the file defines, up to the activations' rounding: half a step
    # (amax / 127) of each block per weight (with the residual pass, of the residual's step),
    # plus fp32 rounding
    wd = ggml.dequantize(w)
    exact = x @ wd.T + bias
    half_step = x.view(21, -1, 32).abs().amax(-1) / (254 * 127 if residual else 254)   # [M, B]
    bound = half_step @ wd.abs().view(n, -1, 32).sum(-1).T                   # [M, N]
    assert ((y - exact).abs() <= bound * 1.001 + 1e-5 * (x.abs() @ wd.abs().T) + 1e-6).all()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kind", FORMATS)
def test_row_output_independent_of_other_rows(kernel, kind):
    """A row's bits alone, among 1..64 rows, at any place, and on one thread or two."""
    w, _ = _weight(kind, 100, 128, seed=1)
    lin = ggml.GGUFLinear(w, kernels=kernel)
    x = _inputs(80, 128)
    full = lin(x)                                                  # 80 rows: two row blocks
    alone = torch.cat([lin(x[i:i + 1]) for i in range(80)])
    assert torch.equal(full, alone)
    gen = torch.Generator().manual_seed(0)
    for m in (2, 3, 5, 8, 9, 16, 17, 33, 64):
        rows = torch.randperm(80, generator=gen)[:m]
        assert torch.equal(lin(x[rows]), full[rows]), m
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(lin(x), full)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(lin(x, prompt=True), full)


@pytest.mark.parametrize("kernel", KERNELS)
def test_norm_linear_fuses_rms_norm(kernel):
    w, _ = _weight("Q4_1", 64, 96)
    lin = ggml.GGUFLinear(w, kernels=kernel)
    x, g = _inputs(12, 96), torch.rand(96) + 0.5
    fused = lin.norm_linear(x, g, 1e-6)
    assert torch.allclose(fused, lin(rms_norm(x, g, 1e-6)), rtol=1e-4, atol=1e-4)
    assert torch.equal(torch.cat([lin.norm_linear(x[i:i + 1], g, 1e-6) for i in range(12)]), fused)


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
            out[kind, arch] = write_gguf(hf, tmp_path_factory.mktemp("gguf") / f"m-{arch}-{kind}.gguf", kind)
        return out[kind, arch]
    return make


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize("kind,arch", [(f, "llama") for f in FORMATS] + [("Q4_0", "qwen2")])  # qwen2: q/k/v biases
def test_gguf_model_verify_equals_autoregressive(tiny_gguf, kind, arch, kernels):
    """Logits of a token fed one per step equal its logits inside one 11-token forward; the
    model is close to the fp32 dequantisation of the same file."""
    lm = load_model(tiny_gguf(kind, arch), torch.float32, keep_quantized=True)
    assert isinstance(lm.weights["layers.0.wqkv"], ggml.GGUFWeight)
    model = Transformer(lm.args, lm.weights, torch.bfloat16, quantization="gguf", kernels=kernels)
    ids = torch.randint(0, lm.args.vocab_size, (31,))
    cache = model.new_cache(64)
    model.forward(ids[:20], torch.arange(20), [SeqInput(cache, 20)])
    cache.commit(range(20))
    chunk = model.forward(ids[20:], torch.arange(20, 31), [SeqInput(cache, 11)])
    for i in range(20, 31):
        step = model.forward(ids[i:i + 1], torch.tensor([i]), [SeqInput(cache, 1)])
        cache.commit([0])
        assert torch.equal(step[0], chunk[i - 20]), f"position {i}"
    fp = load_model(tiny_gguf(kind, arch), torch.float32)
    ref = Transformer(fp.args, fp.weights, torch.float32, kernels=kernels)
    c2 = ref.new_cache(64)
    full = ref.forward(ids, torch.arange(31), [SeqInput(c2, 31)])[20:]
    assert (chunk - full).abs().max() < 0.05 * full.abs().max()


PLUGINS = ['{"plugin_type": "memory_decoding", "decoding_length": 16}',
           '{"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}', '{"plugin_type": "hybrid"}']


@pytest.mark.parametrize("kernels", per_isa())
def test_gguf_llm_parallel_decoding_identical(tiny_gguf, kernels):
    """Through the public API, quantization "gguf": every drafter's greedy output is AR's."""
    from drafters import RandomTreeDrafter
    llm = LLM(str(tiny_gguf("Q4_1")), quantization="gguf", kernels=kernels.label)
    assert llm.config.quantization == "gguf"
    prompts = ["hello world", "aaaa bbbb aaaa bbbb aaaa", "1, 2, 3, 4,"]
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    ar = llm.generate(prompts, params)
    for plugin in PLUGINS if kernels.module is not None else PLUGINS[:1]:   # torch: slow, one suffices
        assert [o.token_ids for o in llm.generate(prompts, params, plugin_params=plugin)] == [o.token_ids for o in ar]
    llm.engine.default_drafter = RandomTreeDrafter(llm.model.args.vocab_size, 9, seed=3)
    assert [o.token_ids for o in llm.generate(prompts, params)] == [o.token_ids for o in ar]


def test_gguf_is_the_default_for_gguf_files_with_kernels(tiny_gguf, tiny_model_dir):
    llm = LLM(str(tiny_gguf("Q8_0")))
    expected = "gguf" if llm.kernels.module is not None else None
    assert llm.config.quantization == expected or (expected is None and llm.config.quantization != "gguf")
    assert LLM(str(tiny_gguf("Q8_0")), dtype="float32").config.quantization is None   # dequantised, as before
    with pytest.raises(ConfigError, match="not a .gguf file") as e:
        LLM(str(tiny_model_dir("llama")), quantization="gguf")
    assert "\n" not in str(e.value)


def test_resolve_numerics_for_gguf_files():
    fake = cpu_kernels.Kernels("avx2", module=object(), w8a8_variant="avx2")
    pair = lambda n: (n.dtype, n.quantization)  # noqa: E731
    assert pair(cpu_kernels.resolve_numerics("auto", "auto", fake, gguf_file=True)) == ("bfloat16", "gguf")
    assert pair(cpu_kernels.resolve_numerics("auto", "auto", fake)) == ("bfloat16", "w8a8")
    assert pair(cpu_kernels.resolve_numerics("auto", "auto", cpu_kernels.TORCH, gguf_file=True)) == ("bfloat16", None)
    assert pair(cpu_kernels.resolve_numerics("float32", "auto", fake, gguf_file=True)) == ("float32", None)
    assert pair(cpu_kernels.resolve_numerics("auto", "gguf", cpu_kernels.TORCH, gguf_file=True)) == ("bfloat16", "gguf")
    with pytest.raises(ConfigError, match="not a .gguf file"):
        cpu_kernels.resolve_numerics("auto", "gguf", fake)


def test_file_without_supported_blocks(tiny_gguf, caplog):
    """An F16 file: auto falls back to the CPU's default numerics; asking for gguf is one line."""
    with caplog.at_level(logging.INFO, logger="paraspec.loader"):
        llm = LLM(str(tiny_gguf("F16")))
    assert llm.config.quantization != "gguf"
    assert any("no GGUF kernel for F16" in r.message for r in caplog.records)
    with pytest.raises(ConfigError, match="no Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K weights") as e:
        LLM(str(tiny_gguf("F16")), quantization="gguf")
    assert "\n" not in str(e.value)
