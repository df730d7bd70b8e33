"""Acceptance rule: greedy walk, and the sampled distribution (chi-square) against plain sampling,
including the biased "one draw per candidate row, keep the longest match" variant it must avoid."""

import numpy as np
import pytest
from scipy.stats import chisquare

from paraspec.decoding.contract.acceptance import walk
from paraspec.decoding.contract.tree import DraftTree

V = 4
P1 = np.array([0.3, 0.3, 0.2, 0.2])  # p(x1)
P2 = np.array(
    [
        [0.1, 0.6, 0.2, 0.1],  # p(x2 | x1)
        [0.25, 0.25, 0.25, 0.25],
        [0.7, 0.1, 0.1, 0.1],
        [0.4, 0.3, 0.2, 0.1],
    ]
)
CANDIDATES = [[0, 2], [1, 3], [0, 1]]  # three 2-token guesses, two share a prefix


def true_joint() -> np.ndarray:
    return (P1[:, None] * P2).ravel()


def sample_and_match(rng: np.random.Generator, tree: DraftTree) -> tuple[int, int]:
    children = tree.children()
    path: list[int] = []

    def dist_of_row(row: int) -> np.ndarray:
        return P1 if row == 0 else P2[tree.tokens[row - 1]]

    def draw(row: int) -> int:
        return int(rng.choice(V, p=dist_of_row(row)))

    acc = walk(children, draw, max_tokens=10, is_stop=lambda t: False)
    path = acc.tokens
    if len(path) == 1:  # only the bonus token: the next step draws x2 from its context
        path.append(int(rng.choice(V, p=P2[path[0]])))
    return path[0], path[1]


def biased_longest_match(rng: np.random.Generator) -> tuple[int, int]:
    best, best_len = None, -1
    for cand in CANDIDATES:  # independent draws for every candidate's rows
        x1 = int(rng.choice(V, p=P1))
        x2 = int(rng.choice(V, p=P2[x1]))
        matched = 0 if x1 != cand[0] else (1 if x2 != cand[1] else 2)
        if matched > best_len:
            best, best_len = (x1, x2), matched
    return best


def _counts(samples) -> np.ndarray:
    c = np.zeros(V * V)
    for a, b in samples:
        c[a * V + b] += 1
    return c


N = 20000


def test_sample_and_match_keeps_the_distribution():
    rng = np.random.default_rng(0)
    tree = DraftTree.from_paths(CANDIDATES)
    assert len(tree) == 5  # the shared prefix 0 is one node
    counts = _counts(sample_and_match(rng, tree) for _ in range(N))
    assert chisquare(counts, true_joint() * N).pvalue > 1e-3


def test_the_biased_variant_fails_the_same_test():
    rng = np.random.default_rng(0)
    counts = _counts(biased_longest_match(rng) for _ in range(N))
    assert chisquare(counts, true_joint() * N).pvalue < 1e-9


def test_greedy_walk_accepts_the_argmax_path_plus_bonus():
    tree = DraftTree.from_paths([[5, 6, 7], [5, 9], [8]])
    argmax = {0: 5, 1: 6, 2: 7, 3: 1}  # rows: root, 5, 6, 7 (nodes 0, 1, 2), ...
    acc = walk(tree.children(), lambda r: argmax.get(r, 0), 10, lambda t: False)
    assert acc.tokens == [5, 6, 7, 1] and acc.nodes == [0, 1, 2] and not acc.stopped
    acc = walk(tree.children(), lambda r: {0: 8}.get(r, 3), 10, lambda t: False)
    assert acc.tokens == [8, 3] and acc.nodes == [4]
    acc = walk(tree.children(), lambda r: 4, 10, lambda t: False)  # first guess wrong: bonus only
    assert acc.tokens == [4] and acc.nodes == []


@pytest.mark.parametrize("limit,stop,expected", [(2, set(), [5, 6]), (10, {6}, [5, 6])])
def test_walk_stops_at_budget_and_stop_tokens(limit, stop, expected):
    tree = DraftTree.chain([5, 6, 7])
    acc = walk(tree.children(), lambda r: [5, 6, 7, 8][r], limit, stop.__contains__)
    assert acc.tokens == expected and acc.stopped
