"""Tree-mask forward + KV compaction == recomputing the accepted path from scratch."""

import random

import pytest
import torch

from paraspec.decoding.contract.proposer import Proposal
from paraspec.decoding.contract.tree import DraftTree
from paraspec.decoding.contract.verify import build_query
from kernel_paths import per_isa
from paraspec.model.loader import load_model
from paraspec.model.attention import max_draft_rows
from paraspec.model.transformer import SeqInput, Transformer


@pytest.fixture(params=per_isa())
def attention_path(request):
    """Decode attention through csrc/attention.cpp built for each ISA this CPU runs, or through
    the torch path: every one must keep verification bit-identical to autoregressive steps."""
    return request.param


def _model(path, dtype=torch.float32, kernels=None, kv_dtype=torch.float32):
    lm = load_model(path, dtype)
    return Transformer(lm.args, lm.weights, dtype, kernels=kernels, kv_dtype=kv_dtype)


def _random_tree(rng: random.Random, n: int, vocab: int) -> DraftTree:
    tree = DraftTree()
    for i in range(n):
        tree.add(rng.randrange(vocab), rng.randrange(-1, i))
    return tree


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tree_verify_then_compaction_equals_recompute(tiny_model_dir, arch, attention_path):
    model = _model(tiny_model_dir(arch), kernels=attention_path)
    rng = random.Random(0)
    V = model.args.vocab_size
    for trial in range(5):
        prompt = [rng.randrange(V) for _ in range(rng.randrange(3, 40))]
        P = len(prompt)
        cache = model.new_cache(128)
        model.forward(torch.tensor(prompt), torch.arange(P), [SeqInput(cache, P)])
        cache.commit(range(P))
        tree = _random_tree(rng, 12, V)
        root = rng.randrange(V)
        q = build_query(root, P, Proposal(tree))
        logits = model.forward(
            torch.tensor(q.tokens),
            torch.tensor(q.positions),
            [SeqInput(cache, len(q.tokens), q.mask)],
        )
        node = rng.randrange(len(tree))
        path = tree.path_to(node)
        cache.commit([0] + [n + 1 for n in path])
        accepted = prompt + [root] + [tree.tokens[n] for n in path]
        # reference: a fresh prefill of the committed tokens
        fresh = model.new_cache(128)
        want = model.forward(
            torch.tensor(accepted), torch.arange(len(accepted)), [SeqInput(fresh, len(accepted))]
        )
        fresh.commit(range(len(accepted)))
        L = len(accepted)
        assert cache.length == fresh.length == L
        assert torch.allclose(cache.k[:, :, :L], fresh.k[:, :, :L], atol=1e-5)
        assert torch.allclose(cache.v[:, :, :L], fresh.v[:, :, :L], atol=1e-5)
        # the verify pass's logits on the accepted path equal the recomputed ones
        assert torch.allclose(logits[0], want[P], atol=1e-4)
        for depth, n in enumerate(path, start=1):
            assert torch.allclose(logits[n + 1], want[P + depth], atol=1e-4)
        # and the next step from the compacted cache equals the next step from the fresh one
        nxt = rng.randrange(V)
        a = model.forward(torch.tensor([nxt]), torch.tensor([L]), [SeqInput(cache, 1)])
        b = model.forward(torch.tensor([nxt]), torch.tensor([L]), [SeqInput(fresh, 1)])
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize(
    "dtype,kv_dtype",
    [
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float16),
    ],
    ids=["fp32", "bf16", "fp32-kv16"],
)
@pytest.mark.parametrize("hidden", [128, 256])  # head sizes 32 and 64 (the kernel's fast path)
def test_row_invariance_tree_verify_equals_autoregressive_bit_for_bit(
    tiny_model_dir, dtype, kv_dtype, hidden, attention_path
):
    """A draft node's logits from one tree-verify pass are bit-identical to the logits of
    one-token autoregressive steps along its path (the property behind exact greedy output),
    with an fp32 or an fp16 KV cache."""
    model = _model(
        tiny_model_dir("llama", hidden=hidden, heads=4, kv_heads=2, n_layers=3),
        dtype,
        attention_path,
        kv_dtype,
    )
    rng = random.Random(1)
    V = model.args.vocab_size
    for trial in range(6):
        prompt = [rng.randrange(V) for _ in range(rng.choice([5, 60, 240, 250, 300, 500]))]
        P = len(prompt)
        root = rng.randrange(V)
        verify_cache, ar_cache = model.new_cache(512), model.new_cache(512)
        for c in (verify_cache, ar_cache):
            model.forward(torch.tensor(prompt), torch.arange(P), [SeqInput(c, P)])
            c.commit(range(P))
        # the engine never lets the root and drafts straddle a key-bucket boundary
        tree = _random_tree(rng, min(rng.choice([3, 8, 15, 30]), max_draft_rows(verify_cache)), V)
        q = build_query(root, P, Proposal(tree))
        out = model.forward(
            torch.tensor(q.tokens),
            torch.tensor(q.positions),
            [SeqInput(verify_cache, len(q.tokens), q.mask)],
        )
        ar = _ar_steps_along(model, ar_cache, P, root, tree)
        assert sorted(ar) == list(range(len(tree)))
        for node in range(len(tree)):
            assert torch.equal(ar[node], out[node + 1]), f"trial {trial} node {node}"


def _ar_steps_along(model, cache, P: int, root: int, tree: DraftTree) -> dict[int, torch.Tensor]:
    """Each node's logits from one-token autoregressive steps along its path (root first, at P).
    The tree is walked depth first with the cache cut back to the node's parent's path, so each
    node's step runs once, on a cache holding exactly its ancestors (as feeding the path anew
    would; tree.path_to(node) is that path), not once per descendant."""
    children: dict[int, list[int]] = {}
    for n, p in enumerate(tree.parents):
        children.setdefault(p, []).append(n)
    cache.truncate(P)
    model.forward(torch.tensor([root]), torch.tensor([P]), [SeqInput(cache, 1)])
    cache.commit([0])
    out, stack = {}, [(n, 1) for n in reversed(children.get(-1, []))]
    while stack:
        node, depth = stack.pop()
        assert depth == len(tree.path_to(node))
        cache.truncate(P + depth)  # root + the node's ancestors
        step = model.forward(
            torch.tensor([tree.tokens[node]]), torch.tensor([P + depth]), [SeqInput(cache, 1)]
        )
        cache.commit([0])
        out[node] = step[0]
        stack += [(c, depth + 1) for c in reversed(children.get(node, []))]
    return out


def test_batched_sequences_are_independent(tiny_model_dir, attention_path):
    """Rows of other sequences sharing a forward do not change a sequence's logits."""
    model = _model(tiny_model_dir("llama"), torch.bfloat16, attention_path)
    rng = random.Random(2)
    V = model.args.vocab_size
    prompts = [[rng.randrange(V) for _ in range(n)] for n in (7, 30, 90)]
    caches = []
    for p in prompts:
        c = model.new_cache(256)
        model.forward(torch.tensor(p), torch.arange(len(p)), [SeqInput(c, len(p))])
        c.commit(range(len(p)))
        caches.append(c)
    trees = [DraftTree.chain([1, 2, 3]), _random_tree(rng, 9, V), DraftTree()]
    queries = [build_query(5, len(p), Proposal(t)) for p, t in zip(prompts, trees)]
    together = model.forward(
        torch.tensor(sum((q.tokens for q in queries), [])),
        torch.tensor(sum((q.positions for q in queries), [])),
        [SeqInput(c, len(q.tokens), q.mask) for c, q in zip(caches, queries)],
    )
    offset = 0
    for c, q in zip(caches, queries):
        alone = model.forward(
            torch.tensor(q.tokens), torch.tensor(q.positions), [SeqInput(c, len(q.tokens), q.mask)]
        )
        assert torch.equal(alone, together[offset : offset + len(q.tokens)])
        offset += len(q.tokens)


def test_commit_keeps_only_the_chosen_slots(tiny_model_dir):
    model = _model(tiny_model_dir("llama"))
    cache = model.new_cache(8)
    k = torch.arange(5 * cache.k.shape[1] * cache.k.shape[3], dtype=torch.float32).view(
        5, cache.k.shape[1], -1
    )
    for layer in range(model.args.n_layers):
        cache.write(layer, k, k)
    cache.commit([0, 2, 4])
    assert cache.length == 3
    assert torch.equal(cache.k[0, :, 1], k[2])
    assert torch.equal(cache.k[0, :, 2], k[4])
    # V stored as computed, fp32
    assert cache.v.dtype == torch.float32 and cache.v.shape == cache.k.shape
    assert torch.equal(cache.v[0, :, 1], k[2]) and torch.equal(cache.v[0, :, 2], k[4])
    with pytest.raises(ValueError):
        cache.truncate(4)


def test_fp16_cache_rounds_once_and_keeps_its_dtype(tiny_model_dir):
    """An fp16 cache holds what torch's .half() rounds K and V to; growing and compacting it keep
    the dtype and the values; it takes half an fp32 cache's bytes."""
    model = _model(tiny_model_dir("llama"), kv_dtype=torch.float16)
    cache = model.new_cache(8)
    assert cache.k.dtype == cache.v.dtype == torch.float16
    assert cache.nbytes() * 2 == _model(tiny_model_dir("llama")).new_cache(8).nbytes()
    k = torch.randn(
        5, cache.k.shape[1], cache.k.shape[3], generator=torch.Generator().manual_seed(0)
    )
    for layer in range(model.args.n_layers):
        cache.write(layer, k, -k)
    cache.commit([0, 2, 4])
    cache.reserve(cache.capacity + 1)
    assert cache.k.dtype == torch.float16 and cache.length == 3
    assert torch.equal(cache.k[0, :, :3], k[[0, 2, 4]].half().transpose(0, 1))
    assert torch.equal(cache.v[0, :, :3], (-k[[0, 2, 4]]).half().transpose(0, 1))
