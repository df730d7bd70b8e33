"""Attention under SeqInput.mask_from: rows see the slots [0, mask_from) and what their mask allows of
the slots after, committed ones included (ASPD's branches, whose siblings sit in committed slots).

Each row must equal its twin: one row over a compacted cache holding exactly its visible keys in
slot order, or in the order given (bit for bit on the compiled paths, by construction; to
fp64-regrouping error on torch).
"""

import pytest
import torch

from kernel_paths import per_isa
from paraspec.model.args import ModelArgs
from paraspec.model.kv_cache import KVCache
from paraspec.model.attention import attention, attention_bias
from paraspec.model.transformer import SeqInput, Transformer

HD, KV, GROUP = 32, 2, 3


def _cache(n: int, length: int, seed: int) -> KVCache:
    args = ModelArgs(
        arch="llama",
        vocab_size=16,
        dim=HD * KV * GROUP,
        n_layers=1,
        n_heads=KV * GROUP,
        n_kv_heads=KV,
        head_dim=HD,
        hidden_dim=16,
    )
    cache = KVCache(args, n)
    g = torch.Generator().manual_seed(seed)
    cache.k[0, :, :n] = torch.randn(KV, n, HD, generator=g)
    cache.v[0, :, :n] = torch.randn(KV, n, HD, generator=g)
    cache.length = length
    return cache


def _attend(kernels, q, cache, mask, mask_from, order=None):
    if kernels.attention is not None:
        start = cache.length if mask_from is None else mask_from
        return kernels.attention(
            q.contiguous(),
            cache.k[0],
            cache.v[0],
            start,
            torch.empty(0, dtype=torch.bool) if mask is None else mask,
            HD**-0.5,
            order,
        )
    return attention(
        q, cache, 0, attention_bias(cache, q.shape[0], mask, GROUP, mask_from), HD**-0.5
    )


@pytest.mark.parametrize("kernels", per_isa())
def test_rows_equal_their_compacted_twins(kernels):
    # three interleaved "branches" written in committed slots [40, 52), 4 new rows after them
    mask_from, length, n_new = 40, 52, 4
    cache = _cache(length + n_new, length, seed=1)
    branch_of = [i % 3 for i in range(length - mask_from)] + [0, 1, 2, 0]
    m = len(branch_of)
    mask = torch.zeros(n_new, m, dtype=torch.bool)
    for r in range(n_new):
        col = length - mask_from + r
        mask[r, : col + 1] = torch.tensor([b == branch_of[col] for b in branch_of[: col + 1]])
    mask[3, length - mask_from] = True  # row 3 also sees new row 0 (its own branch's head)
    q = torch.randn(n_new, KV * GROUP, HD, generator=torch.Generator().manual_seed(2))
    out = _attend(kernels, q, cache, mask, mask_from)
    exact = kernels.attention is not None
    for r in range(n_new):
        slots = list(range(mask_from)) + [
            mask_from + j for j in mask[r].nonzero().flatten().tolist()
        ]
        twin = _cache(len(slots), len(slots) - 1, seed=0)
        twin.k[0, :, : len(slots)] = cache.k[0, :, slots]
        twin.v[0, :, : len(slots)] = cache.v[0, :, slots]
        alone = _attend(kernels, q[r : r + 1], twin, None, None)
        if exact:
            assert torch.equal(alone[0], out[r]), f"row {r} differs from its twin"
        else:
            torch.testing.assert_close(alone[0], out[r], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kernels", per_isa())
def test_key_order_ranks_the_masked_slots(kernels):
    """With an order (ASPD's flattened order over a block's slots, which are interleaved by
    step), each row equals its twin over a cache holding its visible keys in rank order."""
    mask_from, length, n_new = 40, 70, 2
    cache = _cache(length + n_new, length, seed=5)
    branch_of = [i % 3 for i in range(length - mask_from)] + [1, 3]  # new row 1 sees every branch
    m = len(branch_of)
    order = torch.tensor([b * 1000 + j for j, b in enumerate(branch_of)])
    mask = torch.zeros(n_new, m, dtype=torch.bool)
    mask[0] = torch.tensor([b == 1 for b in branch_of[:-1]] + [False])
    mask[1] = True
    q = torch.randn(n_new, KV * GROUP, HD, generator=torch.Generator().manual_seed(6))
    out = _attend(kernels, q, cache, mask, mask_from, order)
    for r in range(n_new):
        seen = sorted(mask[r].nonzero().flatten().tolist(), key=lambda j: int(order[j]))
        slots = list(range(mask_from)) + [mask_from + j for j in seen]
        twin = _cache(len(slots), len(slots) - 1, seed=0)
        twin.k[0, :, : len(slots)] = cache.k[0, :, slots]
        twin.v[0, :, : len(slots)] = cache.v[0, :, slots]
        alone = _attend(kernels, q[r : r + 1], twin, None, None)
        if kernels.attention is not None:
            assert torch.equal(alone[0], out[r]), f"row {r} differs from its twin in rank order"
        else:  # the torch path's fp64 sums do not take an order
            torch.testing.assert_close(alone[0], out[r], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kernels", per_isa())
def test_mask_from_at_the_length_is_the_usual_tree_mask(kernels):
    cache = _cache(30, 26, seed=3)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    q = torch.randn(4, KV * GROUP, HD, generator=torch.Generator().manual_seed(4))
    assert torch.equal(_attend(kernels, q, cache, mask, 26), _attend(kernels, q, cache, mask, None))


def test_forward_rejects_a_mask_of_the_wrong_width(tiny_model_dir):
    from paraspec.model.loader import load_model

    loaded = load_model(tiny_model_dir("llama"), torch.float32)
    model = Transformer(loaded.args, loaded.weights, torch.float32)
    cache = model.new_cache(16)
    model.forward(torch.arange(5), torch.arange(5), [SeqInput(cache, 5)], prompt=True)
    cache.commit(range(5))
    with pytest.raises(ValueError, match="tree_mask has shape"):
        model.forward(
            torch.tensor([1]),
            torch.tensor([5]),
            [SeqInput(cache, 1, torch.ones(1, 1, dtype=torch.bool), 3)],
        )
