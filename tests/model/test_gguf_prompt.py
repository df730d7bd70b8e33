"""Prompt chunks of GGUF models (ggml.GGUFLinear._dense, csrc/gguf_dequant.h): the packed blocks
written back to a plain matrix give dequantize()'s values exactly, for every format (Q4_0, Q4_1,
Q8_0, Q5_0 and the K-quants Q4_K, Q6_K) on every ISA module; tall prompt chunks multiply those,
short ones and decode rows keep the integer kernel; a long prompt's logits are those of the
dequantised weights, and it decodes in parallel exactly as AR."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernel_paths import per_isa
from paraspec import LLM, SamplingParams
from paraspec.model import ggml
from paraspec.model.ggml_kquants import QUANTIZERS
from paraspec.model.gguf_requant import have_llamacpp, llamacpp_quantize
from tiny_models import write_gguf

# the torch path has no prompt road: the reference runs
COMPILED = [p for p in per_isa() if p.id != "torch"]
# fp16 fields
SCALES = {
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q8_0": [0],
    "Q5_0": [0],
    "Q4_K": [0, 2],
    "Q6_K": [208],
}
# partial panels too
SHAPES = {
    "flat": [(70, 96), (32, 160), (259, 64)],
    "K": [(70, 256), (32, 512), (259, 256)],
}


def _weight(kind: str, n: int, k: int, seed: int = 0) -> ggml.GGUFWeight:
    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32) * 0.05
    w[:, 3] *= 8
    if kind in QUANTIZERS:  # K-quants: paraspec's own quantiser
        return ggml.GGUFWeight(kind, QUANTIZERS[kind](w))
    import gguf

    return ggml.GGUFWeight(kind, gguf.quants.quantize(w, gguf.GGMLQuantizationType[kind]))


def _random_bytes(kind: str, n: int, k: int, seed: int = 0) -> ggml.GGUFWeight:
    """Any bytes are valid blocks once their fp16 scales are finite: every stored value, scale and
    min, with scales of both signs from fp16 subnormals to 100s."""
    rng = np.random.default_rng(seed)
    values, nbytes = ggml.BLOCK_SIZE[kind]
    raw = rng.integers(0, 256, (n, k // values, nbytes), dtype=np.uint8)
    for at in SCALES[kind]:
        s = rng.standard_normal((n, k // values, 1)) * 10.0 ** rng.uniform(
            -7, 2, (n, k // values, 1)
        )
        raw[..., at : at + 2] = s.astype(np.float16).view(np.uint8)
    return ggml.GGUFWeight(kind, raw.reshape(n, -1))


def _cases() -> list:
    return [
        pytest.param(kind, n, k, id=f"{kind}-{n}x{k}")
        for kind in ggml.DENSE_KINDS
        for n, k in SHAPES["K" if kind in QUANTIZERS else "flat"]
    ]


def test_every_format_has_the_prompt_road():
    assert set(ggml.DENSE_KINDS) == set(ggml.FORMATS)


@pytest.mark.parametrize("kernels", COMPILED)
@pytest.mark.parametrize("source", ["quantiser", "random bytes"])
@pytest.mark.parametrize("kind,n,k", _cases())
def test_dequantize_kernel_gives_dequantize_values(kernels, kind, n, k, source):
    w = _weight(kind, n, k) if source == "quantiser" else _random_bytes(kind, n, k)
    ref = ggml.dequantize(w)
    packed = ggml.pack(w)
    out = torch.full((n, k), float("nan"))
    kernels.module.gguf_dequantize(packed, ggml.FORMATS[kind], n, out)
    assert torch.equal(out, ref) and torch.equal(out.signbit(), ref.signbit())  # -0.0 too
    out16 = torch.zeros(n, k, dtype=torch.bfloat16)
    kernels.module.gguf_dequantize(packed, ggml.FORMATS[kind], n, out16)
    assert torch.equal(out16, ref.bfloat16())  # round to nearest even, as torch
    if source == "random bytes":  # ... ties included
        assert ((ref.view(torch.int32) & 0xFFFF) == 0x8000).any()
    with pytest.raises(RuntimeError, match="out must be"):
        kernels.module.gguf_dequantize(
            packed, ggml.FORMATS[kind], n, torch.zeros(n, k, dtype=torch.float16)
        )
    with pytest.raises(RuntimeError, match="does not match|multiple of 256"):
        kernels.module.gguf_dequantize(packed, ggml.FORMATS[kind], n, torch.zeros(n, k + 32))


@pytest.mark.parametrize("kernels", COMPILED)
@pytest.mark.parametrize("kind", ["Q4_1", "Q5_0", "Q4_K", "Q6_K"])
def test_tall_prompt_chunks_multiply_dequantised_weights(kernels, kind):
    w = _weight(kind, 100, 256, seed=2)
    bias = torch.randn(100)
    lin = ggml.GGUFLinear(w, bias, kernels=kernels)
    dt = ggml.dense_dtype()
    x = torch.randn(ggml.prompt_rows(kernels), 256)
    want = F.linear(x.to(dt), ggml.dequantize(w).to(dt), bias.to(dt)).float()
    assert torch.equal(lin(x, prompt=True), want)
    gamma = torch.rand(256) + 0.5
    normed = F.rms_norm(x, (256,), gamma, 1e-5)
    assert torch.equal(
        lin.norm_linear(x, gamma, 1e-5, prompt=True),
        F.linear(normed.to(dt), ggml.dequantize(w).to(dt), bias.to(dt)).float(),
    )
    # shorter chunks and decode rows keep the integer kernel's row-invariant bits
    short = x[: ggml.prompt_rows(kernels) - 1]
    assert torch.equal(lin(short, prompt=True), lin(short))
    assert torch.equal(lin(x)[:5], lin(x[:5]))


def _dense_from(rows: int, monkeypatch) -> None:
    """Prompt chunks of `rows` or more take the dense road on every kernel variant (small chunks
    keep the tests quick; the real thresholds are taller)."""
    for variant in ggml.PROMPT_ROWS:
        monkeypatch.setitem(ggml.PROMPT_ROWS, variant, rows)


@pytest.fixture(scope="module")
def prompt_models(tiny_model_dir, tmp_path_factory):
    """prompt_models(quant) -> a tiny llama .gguf, every matmul in `quant` (dim 256: whole
    K-quant superblocks; Q4_K / Q6_K from paraspec's own quantiser), or "Q4_K_M": llama.cpp's mix."""
    hf = tiny_model_dir("llama", n_layers=2, hidden=256, heads=4, kv_heads=2)
    tmp, out = tmp_path_factory.mktemp("prompt"), {}

    def make(quant: str):
        if quant not in out:
            if quant == "Q4_K_M":
                out[quant] = llamacpp_quantize(make("F32"), tmp / "Q4_K_M.gguf", quant)
            else:
                out[quant] = write_gguf(hf, tmp / f"{quant}.gguf", quant)
        return out[quant]

    return make


# 160 tokens: 48-token chunks (the last 16), a repeat
PROMPT = list(range(5, 125)) + list(range(5, 45))


@pytest.mark.parametrize("kernels", COMPILED)
@pytest.mark.parametrize(
    "quant",
    [
        "Q4_K",
        "Q6_K",
        "Q5_0",
        pytest.param(
            "Q4_K_M",
            marks=pytest.mark.skipif(
                not have_llamacpp(),
                reason="llama-cpp-python (llama.cpp's K quantiser, an optional peer) is not installed",
            ),
        ),
    ],
)
def test_prompt_logits_are_the_dequantised_weights(prompt_models, kernels, quant, monkeypatch):
    _dense_from(32, monkeypatch)
    """A long prompt's logits through the kernel's dense road equal those with every tall
    chunk's weight taken from the torch reference dequantize() of the file's own blocks."""
    kept, ran = {}, []
    init = ggml.GGUFLinear.__init__

    def keep(self, weight, *args, **kwargs):  # the file's blocks, for the reference
        init(self, weight, *args, **kwargs)
        kept[id(self)] = weight

    monkeypatch.setattr(ggml.GGUFLinear, "__init__", keep)
    # the dense road serves two-pass calls on every variant (one pass: plain AVX2 never takes it)
    llm = LLM(
        str(prompt_models(quant)),
        quantization="gguf",
        kernels=kernels.label,
        prefill_chunk=48,
        activation_passes=2,
    )
    dense = ggml.GGUFLinear._dense

    def counted(self, x):
        ran.append(self.kind)
        return dense(self, x)

    monkeypatch.setattr(ggml.GGUFLinear, "_dense", counted)
    got = llm.runner.prefill(llm.runner.new_cache(200), PROMPT)
    if quant == "Q4_K_M":  # the dense road ran, on these formats
        assert {"Q4_K", "Q6_K"} <= set(ran), set(ran)
    else:
        assert set(ran) == {quant}

    def reference(self, x):
        w = ggml.dequantize(kept[id(self)]).to(ggml.dense_dtype())
        return F.linear(
            x.to(w.dtype), w, None if self.bias is None else self.bias.to(w.dtype)
        ).float()

    monkeypatch.setattr(ggml.GGUFLinear, "_dense", reference)
    assert torch.equal(got, llm.runner.prefill(llm.runner.new_cache(200), PROMPT))


@pytest.mark.parametrize("kernels", COMPILED)
@pytest.mark.parametrize("quant", ["Q4_1", "Q4_K", "Q6_K", "Q5_0"])
def test_long_prompt_parallel_decoding_identical(prompt_models, kernels, quant, monkeypatch):
    """A prompt of several tall chunks (dense prompt road), then greedy decoding: every drafter
    gives AR's tokens, and the prompt's logits stay close to the integer kernel's."""
    _dense_from(32, monkeypatch)
    # the dense road serves two-pass calls on every variant (one pass: plain AVX2 never takes it)
    llm = LLM(
        str(prompt_models(quant)),
        quantization="gguf",
        kernels=kernels.label,
        prefill_chunk=48,
        activation_passes=2,
    )
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    ar = llm.generate([PROMPT], params)[0].token_ids
    for plugin in (
        '{"plugin_type": "memory_decoding", "decoding_length": 16}',
        '{"plugin_type": "hybrid"}',
    ):
        assert llm.generate([PROMPT], params, plugin_params=plugin)[0].token_ids == ar
    dense = llm.runner.prefill(llm.runner.new_cache(200), PROMPT)
    _dense_from(10**9, monkeypatch)
    integer = llm.runner.prefill(llm.runner.new_cache(200), PROMPT)
    assert not torch.equal(dense, integer)  # the two roads really differ
    assert (dense - integer).abs().max() < 0.05 * integer.abs().max()


def test_one_pass_prompts_stay_on_the_kernel_except_on_amx():
    """With one activation pass the integer kernel's rows are cheap enough that the dense road
    loses at every chunk size (plain AVX2's fp32 FMAs, and Zen 4's AVX512-BF16 matmul too): no
    threshold, except on AMX, whose bf16 tiles win tall chunks. Two passes keep thresholds."""
    from paraspec.model.kernels import Kernels

    plain, vnni, amx = (
        Kernels(isa, object(), v)
        for isa, v in (("avx2", "avx2"), ("avx512", "vnni512"), ("avx512", "amx"))
    )
    assert ggml.prompt_rows(plain, 1) == ggml.prompt_rows(vnni, 1) == ggml.NEVER
    assert ggml.prompt_rows(Kernels("avx2", object(), "avxvnni"), 1) == ggml.NEVER
    assert ggml.prompt_rows(plain, 2) == ggml.prompt_rows(vnni, 2) == 256
    assert ggml.prompt_rows(amx, 1) == ggml.prompt_rows(amx, 2) == 128
    assert ggml.prompt_rows(Kernels("avx512", object(), "a-future-variant"), 1) == ggml.NEVER
