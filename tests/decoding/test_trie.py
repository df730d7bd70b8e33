"""TokenTrie: insertion (windowed and streamed), visibility, release, prune, cap, save/load, merge."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from paraspec.decoding.memory.memory_file import (
    MemoryFileError,
    add_output_arrays,
    load_trie_file,
    output_arrays,
    save_trie_file,
)
from paraspec.decoding.memory.trie import TokenTrie
from paraspec.errors import ParaspecError

tokens = st.lists(st.integers(0, 6), min_size=0, max_size=40)  # small vocab: many shared paths


def output_memory(trie: TokenTrie) -> dict[tuple[int, ...], int]:
    """Canonical view of the shared memory: path -> output count."""
    parent, token, count = output_arrays(trie)
    paths: list[tuple[int, ...]] = [()]
    for p, t in zip(parent.tolist(), token.tolist()):
        paths.append(paths[p] + (t,))
    return dict(zip(paths[1:], count.tolist()))


def windows(seq: list[int], w: int) -> dict[tuple[int, ...], int]:
    """Reference: every prefix of every window, counted."""
    ref: dict[tuple[int, ...], int] = {}
    for i in range(len(seq)):
        for j in range(i + 1, min(i + w, len(seq)) + 1):
            ref[tuple(seq[i:j])] = ref.get(tuple(seq[i:j]), 0) + 1
    return ref


# ------------------------------------------------------------------------------ insertion
@settings(max_examples=60, deadline=None)
@given(tokens, st.integers(2, 6))
def test_insert_stores_every_window_prefix(seq, w):
    trie = TokenTrie(window=w)
    trie.insert(seq)
    assert output_memory(trie) == windows(seq, w)
    trie.check_invariants()


@settings(max_examples=60, deadline=None)
@given(tokens, st.lists(st.integers(1, 7), min_size=1, max_size=10), st.integers(2, 6))
def test_append_in_any_chunks_equals_insert(seq, cuts, w):
    streamed, whole = TokenTrie(window=w), TokenTrie(window=w)
    whole.insert(seq)
    i = 0
    for n in cuts * 40:
        if i >= len(seq):
            break
        streamed.append("req", seq[i : i + n])
        i += n
    streamed.close("req")
    assert output_memory(streamed) == output_memory(whole)
    streamed.check_invariants()


def test_append_is_searchable_at_once():
    trie = TokenTrie(window=8)
    trie.append("req", [1, 2, 3])
    assert trie.match([1, 2], max_nodes=4).tokens == [3]  # no window-length delay


# ------------------------------------------------------------------------------ visibility, release
def test_prompt_counts_are_private_output_counts_shared():
    trie = TokenTrie(window=6)
    trie.insert([1, 2, 3, 4], key="a")
    trie.append("b", [7, 8, 9])
    assert trie.match([1, 2], key="a").tokens[:2] == [3, 4]
    assert trie.match([1, 2], key="b").tokens == []
    assert trie.match([1, 2]).tokens == []
    assert trie.match([7, 8], key="a").tokens == [9]
    assert trie.lookup([1, 2], key="a") > 0 and trie.lookup([1, 2], key="b") == -1
    assert trie.lookup([7, 8], key="a") == trie.lookup([7, 8]) > 0


def test_release_frees_one_request_and_keeps_the_other():
    trie = TokenTrie(window=6)
    trie.insert([1, 2, 3, 4, 5], key="a")
    trie.insert([1, 2, 3, 9], key="b")
    n_both = trie.n_nodes
    trie.release("a")
    assert trie.match([1, 2], key="b", tree=False).tokens == [3, 9]
    assert trie.match([1, 2], key="a").tokens == []
    assert 0 < trie.n_nodes < n_both  # a's own branches went, the shared ones stayed
    trie.check_invariants()
    trie.release("b")
    assert trie.n_nodes == 0
    trie.release("never-seen")  # harmless


def test_release_keeps_nodes_that_output_also_counts():
    trie = TokenTrie(window=6)
    trie.insert([1, 2, 3, 4], key="a")
    trie.insert([1, 2, 3])
    trie.release("a")
    assert trie.match([1, 2]).tokens == [3]
    trie.check_invariants()


def test_release_key_is_the_request_not_a_slot():
    """Pitfall 8: a new request must not inherit an old one's prompt through a reused slot."""
    trie = TokenTrie(window=6)
    trie.insert([1, 2, 3], key="req-1")
    trie.release("req-1")
    trie.insert([5, 6], key="req-2")
    assert trie.match([1, 2], key="req-2").tokens == []


# ------------------------------------------------------------------------------ match
@settings(max_examples=80, deadline=None)
@given(tokens, tokens, st.integers(1, 15), st.booleans())
def test_match_returns_a_valid_draft_of_stored_paths(prompt, output, budget, tree):
    trie = TokenTrie(window=5)
    trie.insert(prompt, key="r")
    trie.append("r", output)
    context = (prompt + output)[-3:]
    m = trie.match(context, key="r", max_nodes=budget, tree=tree)
    assert len(m.tokens) == len(m.parents) == len(m.probs) <= budget
    known = set(windows(prompt, 5)) | set(windows(output, 5))
    for i, p in enumerate(m.parents):
        assert -1 <= p < i  # parents first
        assert 0 < m.probs[i] <= (1.0 if p < 0 else m.probs[p])
        path = [m.tokens[i]]
        while p >= 0:
            path.insert(0, m.tokens[p])
            p = m.parents[p]
        # every draft path continues the last 1 or 2 context tokens somewhere in the memory
        assert any(tuple(context[-k:] + path) in known for k in (1, 2) if len(context) >= k)
    if not tree:
        assert m.parents == list(range(-1, len(m.tokens) - 1))
    siblings = list(zip(m.parents, m.tokens))
    assert len(set(siblings)) == len(siblings)  # no node drafted twice


@pytest.mark.parametrize("tree", [True, False])
def test_match_prefers_the_two_token_context(tree):
    trie = TokenTrie(window=6)
    trie.insert([9, 2, 3] + [5, 2, 4] * 5)  # after "9 2" comes 3; after "2" mostly 4
    assert trie.match([9, 2], tree=tree).tokens[0] == 3
    assert trie.match([0, 2], tree=tree).tokens[0] == 4  # "0 2" unseen: falls back to "2"


def test_tree_prefix_is_the_best_smaller_tree():
    trie = TokenTrie(window=6)
    trie.insert([1, 2, 3, 4] * 5 + [1, 2, 7, 8] * 2)
    big, small = trie.match([1, 2], max_nodes=12), trie.match([1, 2], max_nodes=4)
    assert small.tokens == big.tokens[:4] and small.parents == big.parents[:4]
    assert big.tokens[0] == 3 and 7 in big.tokens


def test_big_fanout_nodes_still_find_prompt_and_frequent_children():
    trie = TokenTrie(window=4)
    seq = []
    for t in range(200):  # token 1 followed by 200 different tokens
        seq += [1, 1000 + t]
    trie.insert(seq + [1, 5] * 30)  # 5 is the frequent follower
    trie.insert([1, 77, 78] * 3, key="r")  # the request's own prompt continuation
    first = set(trie.match([0, 1], key="r", max_nodes=15).tokens)
    assert {5, 77} <= first


# ------------------------------------------------------------------------------ prune and cap
def test_prune_drops_rare_paths_and_keeps_frequent_and_pinned_ones():
    trie = TokenTrie(max_nodes=10_000, window=4)
    trie.insert(list(range(500, 560)), key="live")  # a live prompt
    pinned = trie.n_nodes
    trie.insert([1, 2, 3, 4] * 50)  # frequent: 16 nodes
    trie.insert(list(range(100, 400)))  # seen once
    trie.prune(target=pinned + 20)
    assert trie.n_nodes <= pinned + 20
    assert trie.match([1, 2], tree=False).tokens == [3, 4]
    assert trie.match([500, 501], key="live", tree=False).tokens == [502, 503]
    trie.check_invariants()


def test_prune_cannot_go_below_pinned_nodes():
    trie = TokenTrie(max_nodes=10_000, window=4)
    trie.insert(list(range(100)), key="live")
    pinned = trie.n_nodes
    assert trie.prune(target=0) == 0 and trie.n_nodes == pinned


def test_node_cap_holds_over_1e5_random_insertions():
    rng = random.Random(0)
    trie = TokenTrie(max_nodes=3000, window=6)
    live: list[str] = []
    inserted = 0
    while inserted < 100_000:
        r = rng.random()
        if r < 0.8:
            n = rng.randint(1, 16)
            trie.append(f"s{rng.randrange(4)}", [rng.randrange(50) for _ in range(n)])
        elif r < 0.9:
            n = rng.randint(1, 64)
            key = f"req{inserted}"
            trie.insert([rng.randrange(50) for _ in range(n)], key=key)
            live.append(key)
            if len(live) > 4:  # a bounded batch of live requests
                trie.release(live.pop(0))
        else:
            n = 0
            if live:
                trie.release(live.pop(rng.randrange(len(live))))
        inserted += n
        assert trie.n_nodes <= trie.max_nodes
    trie.check_invariants()
    assert trie.stats().output_nodes > 1000  # the memory is kept, not wiped


def test_a_huge_prompt_does_not_wipe_the_memory():
    trie = TokenTrie(max_nodes=4000, window=4)
    trie.insert([1, 2, 3, 4] * 100)
    trie.insert(list(range(1000, 6000)), key="huge")  # needs more nodes than the cap
    assert trie.n_nodes <= 4000
    assert trie.match([1, 2], tree=False).tokens == [3, 4]
    trie.check_invariants()


# ------------------------------------------------------------------------------ persistence
def test_save_load_round_trip(tmp_path):
    rng = random.Random(1)
    trie = TokenTrie(window=7)
    for i in range(20):
        trie.append(i % 3, [rng.randrange(30) for _ in range(rng.randint(1, 30))])
    trie.insert([101, 102, 103], key="prompt-only")
    path = tmp_path / "memory.trie"
    save_trie_file(path, trie)
    loaded = load_trie_file(path)
    assert loaded.window == 7
    assert output_memory(loaded) == output_memory(trie)
    assert loaded.match([101, 102], key="prompt-only").tokens == []  # prompts are not saved
    loaded.check_invariants()
    small = load_trie_file(path, max_nodes=50)
    assert small.n_nodes <= 50
    small.check_invariants()


def test_merge_adds_counts():
    a, b, both = TokenTrie(window=5), TokenTrie(window=5), TokenTrie(window=5)
    a.insert([1, 2, 3, 4, 1, 2])
    b.insert([2, 3, 9, 1, 2, 3])
    both.insert([1, 2, 3, 4, 1, 2])
    both.insert([2, 3, 9, 1, 2, 3])
    add_output_arrays(a, *output_arrays(b))
    assert output_memory(a) == output_memory(both)
    a.check_invariants()


@pytest.mark.parametrize("payload", [b"", b"not a zip file", b"PK\x03\x04garbage"])
def test_corrupt_file_says_how_to_fix_it(tmp_path, payload):
    path = tmp_path / "bad.trie"
    path.write_bytes(payload)
    with pytest.raises(MemoryFileError, match="delete it"):
        load_trie_file(path)


def test_wrong_content_and_missing_file(tmp_path):
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(MemoryFileError, match="cannot be read"):
        load_trie_file(other)
    good = tmp_path / "good.trie"
    t = TokenTrie(window=4)
    t.insert([1, 2, 3])
    save_trie_file(good, t)
    with np.load(good) as z:
        arrays = dict(z)
    arrays["parent"] = arrays["parent"][::-1].copy()  # children before parents
    bad = tmp_path / "reordered.trie"
    with open(bad, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(MemoryFileError, match="out-of-order"):
        load_trie_file(bad)
    with pytest.raises(ParaspecError, match="does not exist"):
        load_trie_file(tmp_path / "missing.trie")


# ------------------------------------------------------------------------------ random interleavings
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), tokens), max_size=30),
    st.integers(20, 300),
)
def test_invariants_hold_under_any_interleaving(ops, cap):
    trie = TokenTrie(max_nodes=cap, window=5)
    for op, who, seq in ops:
        if op == 0:
            trie.insert(seq, key=f"r{who}")
        elif op == 1:
            trie.release(f"r{who}")
        elif op in (2, 3):
            trie.append(f"s{who}", seq)
        elif op == 4:
            trie.close(f"s{who}")
        else:
            trie.prune(target=len(seq) * 5)
        assert trie.n_nodes <= cap
        trie.check_invariants()
    for who in range(4):  # nothing pinned once every request and stream has ended:
        trie.release(f"r{who}")  # a full prune frees every node
        trie.close(f"s{who}")
    trie.prune(target=0)
    trie.check_invariants()
    assert trie.n_nodes == 0
    trie.insert([1, 2, 3])
    assert trie.lookup([1, 2, 3]) >= 0 and trie.n_nodes >= 3  # and it still takes new tokens
