"""gguf_decoder.py / csrc/decoder.h: the decoder layers in one csrc call give the Python
layer loop's bits (logits and KV cache), for every kernel path, batch, mask and key order; and
EmbeddingRows gives dequantize's rows."""

import pytest
import torch

from kernel_paths import per_isa
from paraspec.model import ggml
from paraspec.model.loader import load_model
from paraspec.model.transformer import SeqInput, Transformer
from tiny_models import write_gguf


@pytest.fixture(scope="module")
def gguf_file(tiny_model_dir, tmp_path_factory):
    def make(kind: str, arch: str = "llama"):
        hf = tiny_model_dir(arch, n_layers=3, hidden=96, heads=6, kv_heads=2)
        return write_gguf(hf, tmp_path_factory.mktemp("gguf") / f"{arch}-{kind}.gguf", kind)

    return make


def model_of(path, kernels) -> Transformer:
    lm = load_model(path, torch.float32, keep_quantized=True)
    return Transformer(lm.args, lm.weights, torch.bfloat16, quantization="gguf", kernels=kernels)


def forward_both(model: Transformer, build) -> None:
    """Run build(model) -> (tokens, positions, seqs) with the csrc decoder and with the Python
    loop (fresh caches from the same prefill) and assert equal logits and caches."""
    decoder = model.decoder
    results = []
    for d in (decoder, None):
        model.decoder = d
        tokens, positions, seqs = build(model)
        logits = model.forward(tokens, positions, seqs)
        results.append((logits, [(s.cache.k.clone(), s.cache.v.clone()) for s in seqs]))
    model.decoder = decoder
    (a, ca), (b, cb) = results
    assert torch.equal(a, b)
    for (ka, va), (kb, vb) in zip(ca, cb):
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def prefilled(model: Transformer, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.args.vocab_size, (n,), generator=g)
    cache = model.new_cache(n + 32)
    model.forward(ids, torch.arange(n), [SeqInput(cache, n)], prompt=True)
    cache.commit(range(n))
    return cache


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize(
    "kind,arch", [("Q4_1", "llama"), ("Q8_0", "llama"), ("Q4_0", "qwen2")]
)  # qwen2: biases
def test_decoder_is_the_python_loop(gguf_file, kind, arch, kernels):
    model = model_of(gguf_file(kind, arch), kernels)
    if kernels.module is None:
        assert model.decoder is None  # no compiled kernels: the loop stays in Python
        return
    assert model.decoder is not None
    tree = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]],
        dtype=torch.bool,
    )

    def one_row(m):
        c = prefilled(m, 20, 0)
        return torch.tensor([7]), torch.tensor([20]), [SeqInput(c, 1)]

    def batch_with_tree(m):  # a causal chain of 3 and a draft tree of 5 over another cache
        c1, c2 = prefilled(m, 20, 1), prefilled(m, 13, 2)
        return (
            torch.tensor([5, 6, 7, 8, 9, 10, 11, 12]),
            torch.tensor([20, 21, 22, 13, 14, 14, 15, 15]),
            [SeqInput(c1, 3), SeqInput(c2, 5, tree)],
        )

    def masked_committed_slots(m):  # ASPD's form: a mask over committed slots and a key order
        c = prefilled(m, 24, 3)
        mask = torch.ones(2, 6, dtype=torch.bool)
        mask[0, 2:4] = False
        mask[1, 0:2] = False
        mask[0, 5] = False
        order = torch.tensor([0, 2, 1, 3, 4, 5])
        return torch.tensor([3, 4]), torch.tensor([22, 22]), [SeqInput(c, 2, mask, 20, order)]

    for build in (one_row, batch_with_tree, masked_committed_slots):
        forward_both(model, build)


def test_no_decoder_for_q_norm_models(gguf_file):
    from paraspec.model import kernels as cpu_kernels

    k = cpu_kernels.default()
    if k.module is None:
        pytest.skip("no compiled kernels here")
    lm = load_model(gguf_file("Q8_0"), torch.float32, keep_quantized=True)
    hd = lm.args.head_dim
    for i in range(lm.args.n_layers):  # Qwen3's q/k norms, which the csrc decoder does not apply
        lm.weights[f"layers.{i}.q_norm"] = lm.weights[f"layers.{i}.k_norm"] = torch.ones(hd)
    assert (
        Transformer(lm.args, lm.weights, torch.bfloat16, quantization="gguf", kernels=k).decoder
        is None
    )


def test_embedding_rows_are_dequantize(gguf_file):
    lm = load_model(gguf_file("Q4_1"), torch.float32, keep_quantized=True)
    w = lm.weights["tok_embeddings"]
    rows = ggml.EmbeddingRows(w, max_bytes=4 * w.shape[1] * 5)  # room for 5 rows
    ids = torch.tensor([3, 9, 3, 40, 9])
    assert torch.equal(rows(ids), ggml.dequantize(w, ids))
    assert len(rows._rows) == 3
    more = torch.tensor([1, 2, 4])
    assert torch.equal(rows(more), ggml.dequantize(w, more))  # 6 > 5 rows: dropped, started over
    assert sorted(rows._rows) == [1, 2, 4]
    # a call that overflows with rows kept before among its own: those are made again too
    mixed = torch.tensor([1, 5, 6, 7])
    assert torch.equal(rows(mixed), ggml.dequantize(w, mixed))
    assert sorted(rows._rows) == [1, 5, 6, 7]
