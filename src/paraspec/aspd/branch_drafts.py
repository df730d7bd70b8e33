"""Drafts inside an ASPD block: each open branch carries its own trie draft below its last token,
all of them verified in the block's one forward (APAR: branching and speculation multiply).

Branch k's draft is the serial drafter's trie matched on the branch's own context (the prefix,
then branch k's tokens: its last two), so a branch drafts what it would draft decoded alone. Its
rows hang below branch k's last fed token: node i sits at that token's position + depth(i) and
sees the shared prefix, branch k's slots and rows, its ancestors and itself, never a sibling
(decode.AspdState.query builds the mask). Verification is the engine's acceptance walk
(acceptance.walk) per branch, with the branch grammar on every draw; a drawn `<|/branch|>` that
a draft node carries is accepted too (its KV is the one the branch's closing step would write).

Which nodes go in: the trie's estimates, calibrated by what branch drafts have been accepted so
far (per decoder, by depth and estimate band: hits over expected of the continuations a walk
could have taken; deep nodes are over-estimated, confident shallow ones under-estimated),
ranked best first over all branches, and the prefix with the most expected tokens per unit of
forward cost (the engine's measured curve: rows up to a padded stair come free). Greedy only: a
sampled branch keeps one token a step (the sampler's counter order would differ from the
no-draft run, so outputs would not be the same draws).
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Hashable, Sequence

import numpy as np

from ..decoding.cost import CostModel
from ..decoding.draft_policy import conditional
from ..decoding.memory import PROMPT_WEIGHT
from ..decoding.tree import ROOT, DraftTree
from .markup import MarkupIds

MAX_ROWS = 32                # rows of one block step, branch roots and drafts together
CANDIDATES = 8               # trie nodes offered per branch
MAX_DEPTH = 8                # deepest branch draft node
DEPTH_EDGES = (2, 3)         # depth bands: 1, 2, 3+ (the trie over-estimates deep nodes more)
Q_EDGES = (0.2, 0.45, 0.85)  # bands of the trie's conditional estimate
PRIOR_EXPECTED = 2.0         # the trie's own estimate weighs as this many expected continuations
DECAY = 0.998                # per observed node: a band follows the recent drafts


class Calibration:
    """Per (depth band, estimate band): hits / expected of the trie's conditional estimates for
    branch draft continuations (decoder-wide, across requests); 1 before evidence."""

    def __init__(self) -> None:
        shape = (len(DEPTH_EDGES) + 1, len(Q_EDGES) + 1)
        self.hits = np.zeros(shape)
        self.expected = np.zeros(shape)

    @staticmethod
    def band(depth: int, q: float) -> tuple[int, int]:
        return bisect_right(DEPTH_EDGES, depth), bisect_right(Q_EDGES, q)

    def factor(self, depth: int, q: float) -> float:
        b = self.band(depth, q)
        return float((self.hits[b] + PRIOR_EXPECTED) / (self.expected[b] + PRIOR_EXPECTED))

    def observe(self, depth: int, q: float, hit: bool) -> None:
        b = self.band(depth, q)
        self.hits[b] = self.hits[b] * DECAY + hit
        self.expected[b] = self.expected[b] * DECAY + q


class BranchDrafter:
    """Trie drafts for the open branches of a block step (one per AspdDecoder)."""

    def __init__(self, trie):
        self.trie = trie
        self.calibration = Calibration()

    def candidates(self, key: Hashable, context: Sequence[int], ids: MarkupIds) -> DraftTree:
        """The trie's continuations of a branch's context, without the nodes no walk can reach:
        markup a branch never draws, and anything below `<|/branch|>` (the branch ends there)."""
        m = self.trie.match(context[-2:], key, CANDIDATES, True, PROMPT_WEIGHT, max_depth=MAX_DEPTH)
        if not m:
            return m
        banned = {ids.title, ids.end_title, ids.para, ids.end_para, ids.branch}
        return m.pruned(lambda i: m.tokens[i] not in banned
                        and (m.parents[i] == ROOT or m.tokens[m.parents[i]] != ids.end_branch))

    def select(self, trees: list[DraftTree], base_rows: int, cost: CostModel, max_nodes: int) -> list[DraftTree]:
        """Each tree cut to the nodes worth verifying: calibrated estimates, best first over all
        trees, the prefix with the most expected tokens (base_rows count one each) per unit of cost."""
        cal_of = self.calibration.factor
        ranked: list[tuple[float, int, int]] = []      # (calibrated p, tree, node)
        for k, tree in enumerate(trees):
            cal: list[float] = []
            for i, (q, d, par) in enumerate(zip(conditional(tree, tree.probs), tree.depths(), tree.parents)):
                cal.append(min(1.0, cal_of(d, q) * q) * (1.0 if par == ROOT else cal[par]))
                ranked.append((cal[i], k, i))
        # stable: a parent (never less likely, earlier in its tree) stays before its children
        ranked.sort(key=lambda e: -e[0])
        ranked = ranked[:max(0, max_nodes)]
        best_n, best, gain = 0, base_rows / cost(base_rows), 0.0
        for n, (p, _, _) in enumerate(ranked, 1):
            gain += p
            rate = (base_rows + gain) / cost(base_rows + n)
            if rate > best:
                best_n, best = n, rate
        keep: list[set[int]] = [set() for _ in trees]
        for _, k, i in ranked[:best_n]:
            keep[k].add(i)
        return [tree.pruned(kept.__contains__) for tree, kept in zip(trees, keep)]

    def observe(self, tree: DraftTree, accepted: Sequence[int], skip: int = -1) -> None:
        """A walk reached the root and `accepted` nodes: each child of a reached node was a chance
        for the text to go on into it (expected: the trie's conditional estimate; a hit if it did).
        Nodes of token `skip` are no trie estimate (a drafted <|/para|>)."""
        reached = {ROOT, *accepted}
        for i, (q, d, par, t) in enumerate(zip(conditional(tree, tree.probs), tree.depths(), tree.parents, tree.tokens)):
            if par in reached and t != skip:
                self.calibration.observe(d, q, i in reached)


def budget_cut(tokens: list[list[int]], prefix: list[int], done: list[bool], room: int,
               checked: int) -> tuple[list[int] | None, int]:
    """Where the token budget ends inside a block, exactly where decoding without branch drafts
    ends it: after the first step j with sum_k n_k(j) >= room (the tokens left), n_k(j) =
    min(prefix_k + j, length_k) being branch k's tokens (fed and pending) after j steps. Drafting
    branches run ahead of each other, so step j is decided once every unfinished branch has
    passed it. tokens[k]: branch k's so far; done[k]: it ended. Returns (the block's tokens up to
    the cut, or None: not yet; the steps decided so far); the caller's emit cuts at the budget."""
    have = [len(t) for t in tokens]
    going = [h - p for h, p, d in zip(have, prefix, done) if not d]
    known = min(going) if going else max(h - p for h, p in zip(have, prefix))
    for j in range(checked + 1, known + 1):
        n = [min(p + j, h) for p, h in zip(prefix, have)]
        if sum(n) >= room:
            return [t for toks, m in zip(tokens, n) for t in toks[:m]], known
    return None, max(checked, known)


def with_close(tree: DraftTree, end_branch: int, end_para: int, max_nodes: int) -> DraftTree:
    """A copy with `end_para` below each `<|/branch|>` node, while there is room: the block's
    closing row, certain once its parent is accepted (so its parent's estimate)."""
    out = DraftTree(list(tree.tokens), list(tree.parents), list(tree.probs))
    for i, t in enumerate(tree.tokens):
        if t == end_branch and len(out) < max_nodes:
            out.add(end_para, i, tree.probs[i])
    return out
