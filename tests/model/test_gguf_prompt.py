"""Prompt chunks of GGUF models (ggml.GGUFLinear._dense, csrc/gguf_dequant.h): the packed blocks
written back to a plain matrix give dequantize()'s values exactly, on every ISA module; tall
prompt chunks multiply those, short ones and decode rows keep the integer kernel; a long prompt
decodes in parallel exactly as AR."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernel_paths import per_isa
from paraspec import LLM, SamplingParams
from paraspec.model import ggml
from tiny_models import write_gguf

COMPILED = [p for p in per_isa() if p.id != "torch"]   # the torch path has no prompt road: the reference runs


def _weight(kind: str, n: int, k: int, seed: int = 0) -> ggml.GGUFWeight:
    import gguf
    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32) * 0.05
    w[:, 3] *= 8
    return ggml.GGUFWeight(kind, gguf.quants.quantize(w, gguf.GGMLQuantizationType[kind]))


@pytest.mark.parametrize("kernels", COMPILED)
@pytest.mark.parametrize("kind", list(ggml.DENSE_KINDS))
@pytest.mark.parametrize("n,k", [(70, 96), (32, 160), (259, 64)])   # partial last panel too
def test_dequantize_kernel_gives_dequantize_values(kernels, kind, n, k):
    w = _weight(kind, n, k)
    ref = ggml.dequantize(w)
    packed = ggml.pack(w)
    out = torch.full((n, k), float("nan"))
    kernels.module.gguf_dequantize(packed, ggml.FORMATS[kind], n, out)
    assert torch.equal(out, ref)
    out16 = torch.zeros(n, k, dtype=torch.bfloat16)
    kernels.module.gguf_dequantize(packed, ggml.FORMATS[kind], n, out16)
    assert torch.equal(out16, ref.bfloat16())                   # round to nearest even, as torch
    with pytest.raises(RuntimeError, match="out must be"):
        kernels.module.gguf_dequantize(packed, ggml.FORMATS[kind], n, torch.zeros(n, k, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="does not match"):
        kernels.module.gguf_dequantize(packed, ggml.FORMATS[kind], n, torch.zeros(n, k + 32))


@pytest.mark.parametrize("kernels", COMPILED)
def test_tall_prompt_chunks_multiply_dequantised_weights(kernels):
    w = _weight("Q4_1", 100, 128, seed=2)
    bias = torch.randn(100)
    lin = ggml.GGUFLinear(w, bias, kernels=kernels)
    dt = ggml.dense_dtype()
    x = torch.randn(ggml.PROMPT_ROWS, 128)
    want = F.linear(x.to(dt), ggml.dequantize(w).to(dt), bias.to(dt)).float()
    assert torch.equal(lin(x, prompt=True), want)
    gamma = torch.rand(128) + 0.5
    normed = F.rms_norm(x, (128,), gamma, 1e-5)
    assert torch.equal(lin.norm_linear(x, gamma, 1e-5, prompt=True), F.linear(normed.to(dt), ggml.dequantize(w).to(dt),
                                                                                bias.to(dt)).float())
    # shorter chunks and decode rows keep the integer kernel's row-invariant bits
    short = x[:ggml.PROMPT_ROWS - 1]
    assert torch.equal(lin(short, prompt=True), lin(short))
    assert torch.equal(lin(x)[:5], lin(x[:5]))


@pytest.mark.parametrize("kernels", COMPILED)
def test_long_prompt_parallel_decoding_identical(tiny_model_dir, tmp_path, kernels):
    """A prompt of several tall chunks (dense prompt road), then greedy decoding: every drafter
    gives AR's tokens, and the prompt's logits stay close to the integer kernel's."""
    path = write_gguf(tiny_model_dir("llama", n_layers=2, hidden=96, heads=6, kv_heads=2), tmp_path / "m.gguf", "Q4_1")
    llm = LLM(str(path), quantization="gguf", kernels=kernels.label, prefill_chunk=48)
    prompt = list(range(5, 125)) + list(range(5, 45))            # 160 tokens: 48-token chunks, one repeat
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    ar = llm.generate([prompt], params)[0].token_ids
    for plugin in ('{"plugin_type": "memory_decoding", "decoding_length": 16}', '{"plugin_type": "hybrid"}'):
        assert llm.generate([prompt], params, plugin_params=plugin)[0].token_ids == ar
    ids = torch.tensor(prompt)
    dense = llm.runner.prefill(llm.runner.new_cache(200), prompt)
    old, ggml.PROMPT_ROWS = ggml.PROMPT_ROWS, 10 ** 9
    try:
        integer = llm.runner.prefill(llm.runner.new_cache(200), prompt)
    finally:
        ggml.PROMPT_ROWS = old
    assert ids.numel() == 160 and not torch.equal(dense, integer)   # the two roads really differ
    assert (dense - integer).abs().max() < 0.05 * integer.abs().max()
