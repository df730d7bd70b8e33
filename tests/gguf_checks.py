"""Checks shared by the GGUF linear tests (test_ggml.py, test_ggml_kquants.py) and W8A8's."""

import torch

from paraspec.model.transformer import SeqInput, Transformer

PLUGINS = [
    '{"plugin_type": "memory_decoding", "decoding_length": 16}',
    '{"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}',
    '{"plugin_type": "hybrid"}',
]


def inputs(m: int, k: int, seed: int = 0) -> torch.Tensor:
    """Rows of very different magnitudes with outlier channels; one all-zero block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-3, 3, m)[:, None]
    x[:, ::37] *= 20
    x[0, :32] = 0
    return x


def assert_kernel_is_reference(w, kernel, residual: bool) -> None:
    """GGUFLinear of GGUFWeight w on `kernel` gives the torch reference's bits (fp32 and bf16
    rows), and the model the file defines up to the activations' rounding: half a step
    (amax / 127) of each block per weight (with the residual pass, of the residual's step),
    plus fp32 rounding."""
    from paraspec.model import ggml
    from paraspec.model import kernels as cpu_kernels

    n, k = w.shape
    bias = torch.randn(n)
    ref = ggml.GGUFLinear(w, bias, kernels=cpu_kernels.TORCH, residual=residual)
    lin = ggml.GGUFLinear(w, bias, kernels=kernel, residual=residual)
    x = inputs(21, k)
    y = lin(x)
    assert y.shape == (21, n) and y.dtype == torch.float32
    assert torch.equal(y, ref(x))
    xb = x.bfloat16()
    assert torch.equal(lin(xb), ref(xb.float()))  # bf16 rows widen exactly
    wd = ggml.dequantize(w)
    exact = x @ wd.T + bias
    half_step = x.view(21, -1, 32).abs().amax(-1) / (254 * 127 if residual else 254)  # [M, B]
    bound = half_step @ wd.abs().view(n, -1, 32).sum(-1).T  # [M, N]
    assert ((y - exact).abs() <= bound * 1.001 + 1e-5 * (x.abs() @ wd.abs().T) + 1e-6).all()


def assert_rows_independent(lin, x: torch.Tensor) -> torch.Tensor:
    """lin(x) row by row equals lin(x) at once, for 1..64 rows at any place and on one thread
    (x: 80 rows, two row blocks). Returns lin(x)."""
    full = lin(x)
    alone = torch.cat([lin(x[i : i + 1]) for i in range(len(x))])
    assert torch.equal(full, alone)
    gen = torch.Generator().manual_seed(0)
    for m in (2, 3, 5, 8, 9, 16, 17, 33, 64):
        rows = torch.randperm(len(x), generator=gen)[:m]
        assert torch.equal(lin(x[rows]), full[rows]), m
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(lin(x), full)
    finally:
        torch.set_num_threads(threads)
    return full


def verify_equals_steps(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of tokens fed one per step equal their logits inside one 11-token forward (what
    verifying a draft computes), after a 20-token prefill. Returns (ids [31], chunk logits)."""
    ids = torch.randint(0, model.args.vocab_size, (31,))
    cache = model.new_cache(64)
    model.forward(ids[:20], torch.arange(20), [SeqInput(cache, 20)])
    cache.commit(range(20))
    chunk = model.forward(ids[20:], torch.arange(20, 31), [SeqInput(cache, 11)])
    for i in range(20, 31):
        step = model.forward(ids[i : i + 1], torch.tensor([i]), [SeqInput(cache, 1)])
        cache.commit([0])
        assert torch.equal(step[0], chunk[i - 20]), f"position {i}"
    return ids, chunk


def assert_gguf_model_lossless(path, kernels):
    """The .gguf at `path` with its blocks as stored (quantization "gguf"): verify == steps, and
    close to the fp32 dequantisation of the same file. Returns the keep_quantized LoadedModel."""
    from paraspec.model.loader import load_model

    lm = load_model(path, torch.float32, keep_quantized=True)
    model = Transformer(lm.args, lm.weights, torch.bfloat16, quantization="gguf", kernels=kernels)
    ids, chunk = verify_equals_steps(model)
    fp = load_model(path, torch.float32)
    ref = Transformer(fp.args, fp.weights, torch.float32, kernels=kernels)
    c2 = ref.new_cache(64)
    full = ref.forward(ids, torch.arange(31), [SeqInput(c2, 31)])[20:]
    assert (chunk - full).abs().max() < 0.05 * full.abs().max()
    return lm, model
