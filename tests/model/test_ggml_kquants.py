"""GGUF K-quants (Q4_K, Q6_K) and Q5_0 run as stored (ggml.py, ggml_kquants.py, csrc/gguf*.h):
every kernel path gives the torch reference's bits, on weights from paraspec's own K quantiser,
from llama.cpp's (llama-cpp-python, when installed) and on random superblock bytes (every scale
and value extreme); row invariance; tiny K-quant models decoding in parallel exactly as AR."""

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
from paraspec.model import ggml
from paraspec.model.ggml_kquants import QUANTIZERS
from paraspec.model.gguf_file import read_gguf
from paraspec.model.gguf_requant import have_llamacpp, llamacpp_quantize
from tiny_models import write_gguf

KINDS = ["Q4_K", "Q6_K", "Q5_0"]
KERNELS = per_variant()
needs_llamacpp = pytest.mark.skipif(
    not have_llamacpp(),
    reason="llama-cpp-python (llama.cpp's K quantiser, an "
    "optional peer: `make peers`) is not installed",
)


def _values(n: int, k: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32) * 0.05
    w[:, 5] *= 8  # an outlier column, as real weights have
    return w


def _weight(kind: str, n: int, k: int, seed: int = 0) -> ggml.GGUFWeight:
    if kind in QUANTIZERS:
        return ggml.GGUFWeight(kind, QUANTIZERS[kind](_values(n, k, seed)))
    import gguf

    return ggml.GGUFWeight(
        kind, gguf.quants.quantize(_values(n, k, seed), gguf.GGMLQuantizationType[kind])
    )


def _random_bytes(kind: str, n: int, k: int, seed: int = 0) -> ggml.GGUFWeight:
    """Any bytes are a valid block once its fp16 scales are finite: extremes of every field
    (Q6_K scale -128 with value -32, the largest exact integer sums)."""
    rng = np.random.default_rng(seed)
    values, nbytes = ggml.BLOCK_SIZE[kind]
    raw = rng.integers(0, 256, (n, k // values, nbytes), dtype=np.uint8)
    scales = {"Q4_K": [0, 2], "Q6_K": [208], "Q5_0": [0]}[kind]
    for at in scales:
        raw[..., at : at + 2] = (
            (rng.random((n, k // values, 1)) * 0.01).astype(np.float16).view(np.uint8)
        )
    return ggml.GGUFWeight(kind, raw.reshape(n, -1))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("source", ["quantiser", "random bytes"])
def test_dequantize_matches_gguf_package(kind, source):
    import gguf

    w = _weight(kind, 40, 512) if source == "quantiser" else _random_bytes(kind, 40, 512)
    ref = gguf.quants.dequantize(w.raw, gguf.GGMLQuantizationType[kind])
    assert np.array_equal(ggml.dequantize(w).numpy(), ref)
    rows = torch.tensor([3, 0, 39, 3])
    assert torch.equal(ggml.dequantize(w, rows), torch.from_numpy(ref)[rows])


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K"])
def test_own_quantiser_round_trips(kind):
    """Each value within half its sub-block's step (Q6_K: a step, as ggml's -32..31 clips the end
    opposite the largest magnitude), plus what the 6-bit (Q4_K) / 8-bit (Q6_K) rounding of the
    steps and mins against the superblock's scales can add at the range's ends."""
    x = _values(24, 512).reshape(24, 2, -1, 32 if kind == "Q4_K" else 16)
    err = np.abs(ggml.dequantize(_weight(kind, 24, 512)).numpy().reshape(x.shape) - x)
    if kind == "Q4_K":
        lo = np.minimum(x.min(-1), 0)
        step = (x.max(-1) - lo) / 15
        d, dmin = step.max(-1) / 63, -lo.min(-1) / 63  # [24, 2] superblock scales
        bound = 0.5 * step + (8 * d + dmin)[..., None]  # 15 steps x d / 2, dmin / 2
    else:
        step = np.abs(x).max(-1) / 32  # the largest |x| at -32 steps
        bound = step + (17 * step.max(-1) / 128)[..., None]  # +32 steps clip to 31; 32 x d / 2
    assert (err <= bound[..., None] * 1.01 + 1e-6).all()
    assert err.max() > 0.3 * step.max()  # the bound is not vacuous


@needs_llamacpp
@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K"])
def test_own_quantiser_close_to_llamacpps(tiny_k_files, kind):
    """llama.cpp's quantiser (pure `kind`) vs ours on the same F32 weights: same format (the
    gguf package decodes both), and our error at most 1.6x llama.cpp's (its search is smarter)."""
    f32 = read_gguf(tiny_k_files("F32"))
    theirs = read_gguf(tiny_k_files(f"pure {kind}")).tensors
    checked = 0
    for t in f32.tensors.values():
        if len(t.shape) != 2 or theirs[t.name].tensor_type.name != kind:
            continue
        x = np.asarray(t.data, np.float32).reshape(int(t.shape[1]), -1)
        mine = ggml.dequantize(ggml.GGUFWeight(kind, QUANTIZERS[kind](x))).numpy()
        ref = ggml.dequantize(
            ggml.GGUFWeight(kind, theirs[t.name].data.reshape(x.shape[0], -1))
        ).numpy()
        rms = lambda a: float(np.sqrt(np.mean((a - x) ** 2)))  # noqa: E731
        assert rms(mine) <= 1.6 * rms(ref), t.name
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("source", ["quantiser", "random bytes"])
@pytest.mark.parametrize("n,k", [(70, 256), (33, 512)])  # n not a multiple of 32: padded panels
def test_kernel_gives_the_torch_references_bits(kernel, kind, residual, source, n, k):
    w = _weight(kind, n, k) if source == "quantiser" else _random_bytes(kind, n, k)
    assert_kernel_is_reference(w, kernel, residual)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kind", KINDS)
def test_row_output_independent_of_other_rows(kernel, kind):
    """A row's bits alone, among 1..64 rows, at any place, and on one thread or two."""
    w = _random_bytes(kind, 100, 256, seed=1)
    lin = ggml.GGUFLinear(w, kernels=kernel)
    x = inputs(80, 256)
    assert_rows_independent(lin, x)  # 80 rows: two row blocks


# --------------------------------------------------------------------------------- model level


@pytest.fixture(scope="module")
def tiny_k_files(tiny_model_dir, tmp_path_factory):
    """tiny_k_files(name) -> a tiny llama (dim 256: whole superblocks) as a .gguf: "F32", "Q4_K" /
    "Q6_K" (our quantiser, every matmul), or llama.cpp's "Q4_K_M" / "pure Q4_K" / "pure Q6_K"."""
    out = {}
    hf = tiny_model_dir("llama", n_layers=2, hidden=256, heads=4, kv_heads=2)
    tmp = tmp_path_factory.mktemp("kq")

    def make(name: str):
        if name not in out:
            if name in ("F32", "Q4_K", "Q6_K"):
                out[name] = write_gguf(hf, tmp / f"{name}.gguf", name)
            else:
                pure = name.startswith("pure ")
                ftype = {"pure Q4_K": "Q4_K_S", "pure Q6_K": "Q6_K"}.get(name, name)
                out[name] = llamacpp_quantize(
                    make("F32"), tmp / f"{name.replace(' ', '-')}.gguf", ftype, pure=pure
                )
        return out[name]

    return make


FILES = ["Q4_K", "Q6_K", pytest.param("Q4_K_M", marks=needs_llamacpp)]


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize("name", FILES)
def test_kquant_model_verify_equals_autoregressive(tiny_k_files, name, kernels):
    """One token a step gives the logits of the same token inside an 11-token forward; K-quant
    linears and LM head as stored; close to the fp32 dequantisation of the same file."""
    lm, model = assert_gguf_model_lossless(tiny_k_files(name), kernels)
    kinds = {w.kind for w in lm.weights.values() if isinstance(w, ggml.GGUFWeight)}
    assert kinds & {"Q4_K", "Q6_K"} and isinstance(lm.weights["tok_embeddings"], ggml.GGUFWeight)
    assert isinstance(model.lm_head, ggml.GGUFLinear)


@pytest.mark.parametrize("kernels", per_isa())
def test_kquant_llm_parallel_decoding_identical(tiny_k_files, kernels):
    """Through the public API on a K-quant file (llama.cpp's Q4_K_M where installed, else ours):
    every drafter's greedy output is AR's."""
    llm = LLM(
        str(tiny_k_files("Q4_K_M" if have_llamacpp() else "Q4_K")),
        quantization="gguf",
        kernels=kernels.label,
    )
    assert llm.config.quantization == "gguf"
    prompts = ["hello world", "aaaa bbbb aaaa bbbb aaaa", "1, 2, 3, 4,"]
    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    ar = [o.token_ids for o in llm.generate(prompts, params)]
    # torch: slow, one suffices
    for plugin in PLUGINS if kernels.module is not None else PLUGINS[:1]:
        assert [o.token_ids for o in llm.generate(prompts, params, plugin_params=plugin)] == ar, (
            plugin
        )


def test_to_f32_keeps_the_model(tiny_k_files, tmp_path):
    """gguf_requant.to_f32 (what llama.cpp's quantiser is fed): same metadata, tokenizer and
    values (the dequantisation); an unknown ftype is one clear error."""
    from paraspec.model.gguf_requant import to_f32
    from paraspec.model.loader import load_model

    src = load_model(tiny_k_files("Q4_K"), torch.float32)
    out = load_model(to_f32(tiny_k_files("Q4_K"), tmp_path / "f32.gguf"), torch.float32)
    assert out.args == src.args and out.tokenizer_source == src.tokenizer_source
    assert src.weights.keys() == out.weights.keys()
    assert all(
        torch.equal(torch.as_tensor(src.weights[k]), torch.as_tensor(out.weights[k]))
        for k in src.weights
    )
    with pytest.raises(ValueError, match="ftype 'Q3_X' is not one of"):
        llamacpp_quantize(tmp_path / "f32.gguf", tmp_path / "x.gguf", "Q3_X")
