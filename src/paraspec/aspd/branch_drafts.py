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
far (one factor per decoder: hits over expected of the continuations a walk could have taken),
ranked best first over all branches, and the prefix with the most expected tokens per unit of
forward cost (the engine's measured curve: rows up to a padded stair come free). Greedy only: a
sampled branch keeps one token a step (the sampler's counter order would differ from the
no-draft run, so outputs would not be the same draws).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

from ..decoding.cost import CostModel
from ..decoding.memory import PROMPT_WEIGHT
from ..decoding.tree import ROOT, DraftTree
from .markup import MarkupIds

MAX_ROWS = 32                # rows of one block step, branch roots and drafts together
CANDIDATES = 8               # trie nodes offered per branch
MAX_DEPTH = 8                # deepest branch draft node
PRIOR_HITS, PRIOR_EXPECTED = 2.0, 4.0   # before evidence, a trie estimate counts at half
DECAY = 0.998                # per observed step: the factor follows the recent drafts


@dataclass
class Calibration:
    """hits / expected of branch draft continuations (decoder-wide, across requests)."""
    hits: float = 0.0
    expected: float = 0.0

    @property
    def factor(self) -> float:
        return (self.hits + PRIOR_HITS) / (self.expected + PRIOR_EXPECTED)

    def observe(self, hits: float, expected: float) -> None:
        self.hits = self.hits * DECAY + hits
        self.expected = self.expected * DECAY + expected


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
        out = DraftTree()
        new: dict[int, int] = {}
        for i, (t, par) in enumerate(zip(m.tokens, m.parents)):
            if t in banned or (par != ROOT and (par not in new or m.tokens[par] == ids.end_branch)):
                continue
            new[i] = out.add(t, ROOT if par == ROOT else new[par], m.probs[i])
        return out

    def select(self, trees: list[DraftTree], base_rows: int, cost: CostModel, max_nodes: int) -> list[DraftTree]:
        """Each tree cut to the nodes worth verifying: calibrated estimates, best first over all
        trees, the prefix with the most expected tokens (base_rows count one each) per unit of cost."""
        f = self.calibration.factor
        ranked: list[tuple[float, int, int]] = []      # (calibrated p, tree, node)
        for k, tree in enumerate(trees):
            cal: list[float] = []
            for i, (p, par) in enumerate(zip(tree.probs, tree.parents)):
                parent_p = 1.0 if par == ROOT else tree.probs[par]
                q = p / parent_p if parent_p > 0 else 0.0
                cal.append(min(1.0, f * q) * (1.0 if par == ROOT else cal[par]))
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
        return [_subtree(tree, kept) for tree, kept in zip(trees, keep)]

    def observe(self, tree: DraftTree, accepted: Sequence[int]) -> None:
        """A walk reached the root and `accepted` nodes: each child of a reached node was a chance
        for the text to go on into it (expected: the trie's conditional estimate; a hit if it did)."""
        reached = {ROOT, *accepted}
        hits = expected = 0.0
        for i, (p, par) in enumerate(zip(tree.probs, tree.parents)):
            if par in reached:
                parent_p = 1.0 if par == ROOT else tree.probs[par]
                expected += p / parent_p if parent_p > 0 else 0.0
                hits += i in reached
        if expected:
            self.calibration.observe(hits, expected)


def _subtree(tree: DraftTree, kept: set[int]) -> DraftTree:
    """The kept nodes (closed under parents) as a tree, in the original order."""
    out = DraftTree()
    new: dict[int, int] = {}
    for i, (t, par) in enumerate(zip(tree.tokens, tree.parents)):
        if i in kept:
            new[i] = out.add(t, ROOT if par == ROOT else new[par], tree.probs[i])
    return out
