import numpy as np
import pytest

from paraspec.decoding.proposer import Proposal
from paraspec.decoding.tree import DraftTree
from paraspec.decoding.verify import build_query


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
