import numpy as np
import pytest

from paraspec.decoding.contract.proposer import Proposal
from paraspec.decoding.contract.tree import DraftTree
from paraspec.decoding.contract.verify import build_query


def test_from_paths_merges_shared_prefixes_parents_first():
    t = DraftTree.from_paths([[1, 2, 3], [1, 2, 4], [5]])
    assert t.tokens == [1, 2, 3, 4, 5] and t.parents == [-1, 0, 1, 1, -1]
    assert t.depths() == [1, 2, 3, 3, 1]
    assert t.path_to(3) == [0, 1, 3]


def test_ancestor_mask_and_positions():
    t = DraftTree.from_paths([[1, 2], [3]])
    m = t.ancestor_mask()
    assert m.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]]
    q = build_query(9, 100, Proposal(t))
    assert q.tokens == [9, 1, 2, 3] and q.positions == [100, 101, 102, 101]
    assert np.array_equal(q.mask.numpy(), m)


def test_chain_query_uses_causal_mask():
    q = build_query(9, 10, Proposal(DraftTree.chain([4, 5, 6])))
    assert q.mask is None and q.positions == [10, 11, 12, 13]


def test_invalid_parents_rejected():
    with pytest.raises(ValueError):
        DraftTree([1, 2], [-1, 1])
    with pytest.raises(ValueError):
        DraftTree([1], [])


def test_follow_walks_the_tree_along_the_given_tokens():
    t = DraftTree.from_paths([[1, 2, 3], [1, 4], [5]])
    assert t.follow([1, 4, 9]) == 2 and t.follow([1, 2, 3, 7]) == 3
    assert t.follow([5]) == 1 and t.follow([9, 1]) == 0 and t.follow([]) == 0


def test_extended_keeps_the_tree_and_adds_missing_nodes_up_to_a_size():
    t = DraftTree.from_paths([[1, 2, 3], [1, 4]])
    e = t.extended([[1, 2, 9], [5, 6], [7]], max_nodes=7)
    assert e.tokens[:4] == t.tokens and e.parents[:4] == t.parents  # unchanged, same indices
    assert len(e) == 7 and e.follow([1, 2, 9]) == 3 and e.follow([5, 6]) == 2 and e.follow([7]) == 0
    assert len(t) == 4  # a copy, not in place
    assert t.extended([[1, 2, 3]], max_nodes=10).tokens == t.tokens  # nothing new to add
    assert len(t.extended([[8, 8, 8]], max_nodes=2)) == 4  # never shrinks


def test_pruned_drops_a_rejected_node_with_its_subtree():
    t = DraftTree()
    a = t.add(5, prob=0.9)
    b = t.add(6, a, 0.5)
    t.add(7, b, 0.4)
    c = t.add(8, prob=0.3)
    t.add(9, c, 0.2)
    kept = t.pruned(lambda i: t.tokens[i] != 6)
    assert (
        kept.tokens == [5, 8, 9] and kept.parents == [-1, -1, 1] and kept.probs == [0.9, 0.3, 0.2]
    )
