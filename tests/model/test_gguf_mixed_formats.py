"""Fused weights whose parts differ in GGUF format (llama.cpp's Q4_K_M: a Q6_K attn_v beside Q4_K
q and k) stay as blocks (ggml_parts.py): no dequantised layer, each part its own kernel call, the
bits of the parts' GGUF linears side by side; row invariance, the csrc decoder's bits equal to the
Python loop's, and parallel decoding identical to AR on every kernel path."""

import logging

import numpy as np
import pytest
import torch

from gguf_checks import assert_gguf_model_lossless, assert_rows_independent, inputs
from kernel_paths import per_isa
from paraspec import LLM, SamplingParams
from paraspec.model import ggml
from paraspec.model import kernels as cpu_kernels
from paraspec.model.ggml_kquants import QUANTIZERS
from paraspec.model.ggml_parts import GGUFParts, GGUFPartsLinear, stack
from paraspec.model.gguf_file import read_gguf
from paraspec.model.loader import load_model
from paraspec.model.transformer import SeqInput, Transformer
from tiny_models import write_gguf

# per tensor-name suffix; the rest Q4_K. llama: q/k Q4_K, v Q6_K, gate Q4_K, up Q6_K; qwen2 (with
# q/k/v biases): three formats in one fused q/k/v
MIXES = {
    "llama": {"attn_v.weight": "Q6_K", "ffn_up.weight": "Q6_K", "output.weight": "Q6_K"},
    "qwen2": {"attn_k.weight": "Q8_0", "attn_v.weight": "Q6_K", "ffn_up.weight": "Q6_K"},
}


def _quantise(a: np.ndarray, kind: str) -> np.ndarray:
    import gguf

    return (
        QUANTIZERS[kind](a)
        if kind in QUANTIZERS
        else gguf.quants.quantize(a, gguf.GGMLQuantizationType[kind])
    )


def write_mixed(f32_path, out, mix: dict[str, str]):
    """A copy of an F32 GGUF with each matmul tensor in the format `mix` names for it (else Q4_K)."""
    import gguf

    reader = read_gguf(f32_path)
    w = gguf.GGUFWriter(str(out), reader.fields["general.architecture"])
    for key, value in reader.fields.items():
        if key != "general.architecture":
            w.add_key_value(key, value, *reader.types[key])
    for t in reader.tensors.values():
        a = np.ascontiguousarray(t.data, dtype=np.float32).reshape(
            [int(d) for d in reversed(t.shape)]
        )
        if a.ndim == 1:
            w.add_tensor(t.name, a)
            continue
        kind = next((k for suffix, k in mix.items() if t.name.endswith(suffix)), "Q4_K")
        w.add_tensor(t.name, _quantise(a, kind), raw_dtype=gguf.GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.fixture(scope="module")
def mixed_file(tiny_model_dir, tmp_path_factory):
    made = {}

    def make(arch: str):
        if arch not in made:  # every row a whole number of 256-superblocks: the K-quants apply
            hf = tiny_model_dir(arch, n_layers=2, hidden=256, heads=4, kv_heads=2)
            d = tmp_path_factory.mktemp("mixed")
            made[arch] = write_mixed(
                write_gguf(hf, d / "f32.gguf"), d / f"{arch}-mixed.gguf", MIXES[arch]
            )
        return made[arch]

    return make


def model_of(path, kernels) -> Transformer:
    lm = load_model(path, torch.float32, keep_quantized=True)
    return Transformer(lm.args, lm.weights, torch.bfloat16, quantization="gguf", kernels=kernels)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_loader_keeps_each_part_in_its_format(mixed_file, arch, caplog):
    with caplog.at_level(logging.INFO):
        lm = load_model(mixed_file(arch), torch.float32, keep_quantized=True)
    assert "dequantised" not in caplog.text
    qkv, gate_up = lm.weights["layers.0.wqkv"], lm.weights["layers.0.w_gate_up"]
    assert isinstance(qkv, GGUFParts) and isinstance(gate_up, GGUFParts)
    # consecutive parts of one format are one weight
    assert (
        qkv.kind == {"llama": "Q4_K+Q6_K", "qwen2": "Q4_K+Q8_0+Q6_K"}[arch]
        and gate_up.kind == "Q4_K+Q6_K"
    )
    a = lm.args
    assert qkv.shape == ((a.n_heads + 2 * a.n_kv_heads) * a.head_dim, a.dim)
    assert gate_up.shape == (2 * a.hidden_dim, a.dim)
    layer = Transformer(
        lm.args, lm.weights, torch.bfloat16, quantization="gguf", kernels=cpu_kernels.TORCH
    ).layers[0]
    assert isinstance(layer.wqkv, GGUFPartsLinear) and isinstance(layer.w_gate_up, GGUFPartsLinear)


def test_stack_merges_runs_of_one_format():
    w = {k: ggml.GGUFWeight(k, QUANTIZERS[k](np.ones((8, 256), np.float32))) for k in QUANTIZERS}
    one = stack([w["Q4_K"], w["Q4_K"]])
    assert isinstance(one, ggml.GGUFWeight) and one.shape == (16, 256)
    parts = stack([w["Q4_K"], w["Q4_K"], w["Q6_K"]])
    assert isinstance(parts, GGUFParts) and [p.shape[0] for p in parts.parts] == [16, 8]
    assert (
        stack(
            [w["Q4_K"], ggml.GGUFWeight("Q6_K", QUANTIZERS["Q6_K"](np.ones((8, 512), np.float32)))]
        )
        is None
    )


@pytest.mark.parametrize("kernels", per_isa())
def test_parts_linear_is_its_parts_side_by_side(kernels):
    """Each part's GGUFLinear's bits, concatenated (bias split with the rows, fused norm too),
    row-invariant, and (without a norm) the torch reference's bits."""
    rng = np.random.default_rng(0)
    raw = [
        (k, rng.standard_normal((n, 256)).astype(np.float32) * 0.05)
        for k, n in (("Q4_K", 64), ("Q8_0", 32), ("Q6_K", 40))
    ]
    parts = [ggml.GGUFWeight(k, _quantise(a, k)) for k, a in raw]
    bias = torch.randn(136)
    lin = GGUFPartsLinear(GGUFParts(parts), bias, kernels=kernels)
    ref = GGUFPartsLinear(GGUFParts(parts), bias, kernels=cpu_kernels.TORCH)
    alone = [
        ggml.GGUFLinear(p, b, kernels=kernels) for p, b in zip(parts, bias.split([64, 32, 40]))
    ]
    x = inputs(80, 256)
    y = assert_rows_independent(lin, x)
    assert torch.equal(y, torch.cat([a(x) for a in alone], -1)) and torch.equal(y, ref(x))
    norm = torch.rand(256) + 0.5
    yn = lin.norm_linear(x, norm, 1e-6)
    assert torch.equal(yn, torch.cat([a.norm_linear(x, norm, 1e-6) for a in alone], -1))
    # (against the reference only closely: a fused norm's sum of squares runs in another order, ggml.py)
    torch.testing.assert_close(yn, ref.norm_linear(x, norm, 1e-6), rtol=1e-4, atol=1e-4)
    assert torch.equal(
        torch.cat([lin.norm_linear(x[i : i + 1], norm, 1e-6) for i in range(5)]), yn[:5]
    )
    exact = x @ torch.cat([ggml.dequantize(p) for p in parts]).T + bias
    assert (y - exact).abs().max() < 1e-3 * exact.abs().max()
    if lin.dense:  # a prompt chunk's road: each part's dequantised copy
        tall = inputs(ggml.prompt_rows(kernels), 256)
        dense = lin(tall, prompt=True)
        torch.testing.assert_close(
            dense, torch.cat([a(tall, prompt=True) for a in alone], -1), rtol=0, atol=0
        )


# the torch reference (slow) on qwen2's three formats with biases only
@pytest.mark.parametrize(
    "arch,kernels",
    [
        pytest.param(arch, *k.values, id=f"{arch}-{k.id}", marks=k.marks)
        for arch in ("llama", "qwen2")
        for k in per_isa()
        if arch == "qwen2" or k.id != "torch"
    ],
)
def test_mixed_model_verify_equals_steps_and_the_dequantised_model(mixed_file, arch, kernels):
    lm, model = assert_gguf_model_lossless(mixed_file(arch), kernels)
    assert isinstance(model.layers[0].wqkv, GGUFPartsLinear)
    # the layers stay in the one csrc decoder call where the kernels are compiled
    assert (model.decoder is not None) == (kernels.module is not None)


@pytest.mark.parametrize("kernels", per_isa())
def test_decoder_gives_the_python_loops_bits(mixed_file, kernels):
    if kernels.module is None:
        pytest.skip("the csrc decoder needs the compiled kernels")
    model = model_of(mixed_file("qwen2"), kernels)
    ids = torch.randint(0, model.args.vocab_size, (24,), generator=torch.Generator().manual_seed(0))
    out = []
    for decoder in (model.decoder, None):
        model.decoder = decoder
        cache = model.new_cache(40)
        model.forward(ids[:20], torch.arange(20), [SeqInput(cache, 20)], prompt=True)
        cache.commit(range(20))
        out.append(
            (model.forward(ids[20:], torch.arange(20, 24), [SeqInput(cache, 4)]), cache.k.clone())
        )
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


@pytest.mark.parametrize("kernels", per_isa())
def test_parallel_decoding_identical_to_ar(mixed_file, kernels):
    llm = LLM(str(mixed_file("qwen2")), quantization="gguf", kernels=kernels.label)
    # torch: slow
    prompts = ["aaaa bbbb aaaa bbbb aaaa", "hello world"][: 1 if kernels.module is None else 2]
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    ar = [o.token_ids for o in llm.generate(prompts, params)]
    for plugin in (
        '{"plugin_type": "memory_decoding", "decoding_length": 16}',
        '{"plugin_type": "hybrid"}',
    ):
        assert [o.token_ids for o in llm.generate(prompts, params, plugin_params=plugin)] == ar, (
            plugin
        )


def test_synthetic_q4_k_m_loads_with_no_dense_layer(tmp_path, caplog):
    """Qwen2.5-0.5B's Q4_K_M mix (q/k Q5_0, v Q8_0 at 896 columns) at two layers."""
    from paraspec.bench import synthetic_gguf as syn

    tiny = syn.SHAPES["qwen2.5-0.5b"].scaled(layers=2, vocab=49152 + 64)
    path = syn.write_synthetic(tmp_path / "tiny.gguf", tiny, "Q4_K_M")
    with caplog.at_level(logging.INFO):
        lm = load_model(path, torch.float32, keep_quantized=True)
    assert "dequantised" not in caplog.text
    # use_more_bits at two layers: layer 1's attn_v
    assert (
        lm.weights["layers.0.wqkv"].kind == "Q5_0"
        and lm.weights["layers.1.wqkv"].kind == "Q5_0+Q8_0"
    )
    model = Transformer(lm.args, lm.weights, torch.bfloat16, quantization="gguf")
    for layer in model.layers:
        for lin in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down):
            assert isinstance(lin, (ggml.GGUFLinear, GGUFPartsLinear)), type(lin)
    assert (model.decoder is not None) == (model.kernels.module is not None)
