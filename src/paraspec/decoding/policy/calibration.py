"""Calibration of the draft policy's node estimates (draft_policy.py, step 1), learnt counterfactually.

A node's calibrated chance, given its parent is accepted, is the source's conditional estimate q
(the node's own estimate over its parent's: the chance the text goes on into it, given it reached
the parent) times a factor measured for nodes like it: same source, depth band and band of q, and
whether the step before accepted 0, 1-3 or 4+ draft tokens (copying comes in stretches; the
streak state). Measured counterfactually: every candidate tree of a step, sent or not, is walked
along the tokens committed after its root; each child of a node the walk reaches was a chance for
the text to go on (expected: its q; a hit if the text went into it). A factor is hits over
expected, leaning on its depth's factor over all bands where evidence is thin, the request's on
the drafter-wide one (PolicyStats: all requests, forgotten more slowly), and that on the source's
own estimate (PRIOR_TRIALS pseudo-trials each).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..contract.tree import ROOT, DraftTree, descend

DEPTH_EDGES = (2, 3, 5, 9, 17, 33)  # depth bands: 1, 2, 3-4, 5-8, 9-16, 17-32, 33+
Q_EDGES = (0.1, 0.2, 0.3, 0.45, 0.65, 0.85)  # bands of a source's conditional estimate
STREAK_EDGES = (1, 4)  # draft tokens accepted last step: 0, 1-3, 4+
PRIOR_TRIALS = 1.0  # the source's own estimate weighs as this many expected continuations
DECAY, SHARED_DECAY = 0.9, 0.995  # per scored step: a request's table, the drafter-wide one
MAX_PENDING = 8  # candidate sets awaiting their truth, per request


def band(edges: Sequence[float], x: float) -> int:
    return bisect_right(edges, x)


DEPTH_BAND = [bisect_right(DEPTH_EDGES, d) for d in range(257)]  # hot loops index this


def streak_state(accepted: int) -> int:
    return band(STREAK_EDGES, accepted)


def conditional(tree: DraftTree, own: Sequence[float]) -> list[float]:
    """Each node's estimate given its parent is accepted: its own over its parent's."""
    return [
        o if par == ROOT else (o / own[par] if own[par] > 0 else 0.0)
        for o, par in zip(own, tree.parents)
    ]


class PolicyStats:
    """What a drafter's requests have measured, together: the calibration table and each
    source's gain. Shared by the policy's requests (a new request starts from it)."""

    def __init__(self, n_sources: int):
        shape = (len(STREAK_EDGES) + 1, n_sources, len(DEPTH_EDGES) + 1, len(Q_EDGES) + 1)
        self.hits = np.zeros(shape)  # continuations accepted
        self.nodes = np.zeros(shape)  # continuations expected (sum of estimates)
        self.gain = [0.1] * n_sources  # optimistic: a source is measured before it can sit out


@dataclass
class PendingSet:
    """One step's candidate trees, kept until the committed tokens after them decide every node."""

    start: int  # context length at the step (the truth starts there)
    state: int
    trees: list[DraftTree | None]  # per source, with the sources' own estimates
    conds: list[list[float]]  # per source, each node's conditional estimate
    depth: int  # deepest node: the truth needed to score them all
    children: list | None = None  # per source, its tree's children() (walked every observe)

    def walks(self) -> list:
        if self.children is None:
            self.children = [t.children() if t else None for t in self.trees]
        return self.children

    def fell_off(self, truth: Sequence[int]) -> bool:
        """Every tree's walk along the truth so far has stopped: all its nodes are decided."""
        return all(c is None or len(descend(c, 0, truth)) < len(truth) for c in self.walks())


@dataclass
class Calibration:
    """One request's: its tables (as PolicyStats'), the candidate sets awaiting their truth and
    the committed tokens they are scored against."""

    hits: np.ndarray
    nodes: np.ndarray
    pending: list[PendingSet] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)  # committed tokens from tail_start on
    tail_start: int = -1
    cached: list | None = None  # [state] -> None or factors(state), from the tables

    @classmethod
    def like(cls, shared: PolicyStats) -> Calibration:
        return cls(np.zeros_like(shared.hits), np.zeros_like(shared.nodes))

    def factors(self, state: int, shared: PolicyStats) -> list:
        """Calibration factors [source][depth band][q band] in streak state `state`, recomputed
        after the tables change (see the module docstring). Only the state a step is in: the
        numpy work is per operation, not per element, and it runs every step."""
        if self.cached is None:
            self.cached = [None] * (len(STREAK_EDGES) + 1)
        if self.cached[state] is None:
            k, sh, se = PRIOR_TRIALS, shared.hits[state], shared.nodes[state]
            h, n = self.hits[state], self.nodes[state]
            shared_d = (sh.sum(-1) + k) / (se.sum(-1) + k)  # [src, depth]
            shared_q = (sh + k * shared_d[..., None]) / (se + k)  # ... x q band
            own_d = (h.sum(-1) + k * shared_d) / (n.sum(-1) + k)
            self.cached[state] = (
                (h + k * own_d[..., None] * shared_q / shared_d[..., None]) / (n + k)
            ).tolist()
        return self.cached[state]

    def sync(self, context: Sequence[int]) -> None:
        """The committed tokens a step's candidates are scored against: those committed since the
        oldest pending step (a gap the drafter was not told of, e.g. the prefill's token, too)."""
        if self.tail_start < 0 or not self.pending:
            self.tail, self.tail_start = [], len(context)
            return
        end = self.tail_start + len(self.tail)
        if len(context) > end:
            self.tail += context[end:]

    def keep(self, pend: PendingSet) -> None:
        """A step's candidates, to score once their truth is known."""
        if self.pending and self.pending[-1].start == pend.start:
            self.pending.pop()  # a second look at the same step replaces the first
        if len(self.pending) >= MAX_PENDING:
            self.pending.pop(0)
        self.pending.append(pend)

    def score(self, shared: PolicyStats) -> int:
        """Score every kept candidate set whose truth is now known, into both tables. Returns how
        many committed tokens the text has followed a candidate tree for, up to now (a copy
        running, sent or not)."""
        keep, done = [], []
        run = 0
        for pend in self.pending:
            at = pend.start - self.tail_start
            truth = self.tail[at : at + pend.depth]
            fell_off = pend.fell_off(truth)
            if not fell_off and len(truth) == len(self.tail) - at:  # followed to the last token
                run = max(run, len(truth))
            if len(truth) < pend.depth and not fell_off:
                keep.append(pend)
            else:
                done.append((pend, truth))
        # the oldest undecided sets make room for the next step's on the truth so far (the trials it
        # decided): where a copy goes on a token a step, unverified, its trees are deeper than
        # MAX_PENDING steps, and dropping them unscored would leave the copy's evidence unlearnt
        while len(keep) >= MAX_PENDING:
            pend = keep.pop(0)
            at = pend.start - self.tail_start
            done.append((pend, self.tail[at : at + pend.depth]))
        self.pending = keep
        if keep:  # only what the oldest pending step still needs is kept
            drop = keep[0].start - self.tail_start
            del self.tail[:drop]
            self.tail_start += drop
        if not done:
            return run
        self.hits *= DECAY
        self.nodes *= DECAY
        shared.hits *= SHARED_DECAY
        shared.nodes *= SHARED_DECAY
        # the trials, as flat table indices, added at once (np.add.at adds in order, as a loop
        # of single-element additions would, without their per-element cost)
        _, n_src, n_depth, n_q = self.hits.shape
        cells: list[int] = []
        hits: list[float] = []
        expect: list[float] = []
        for pend, truth in done:
            walks = pend.walks()
            for s, tree in enumerate(pend.trees):
                if not tree:
                    continue
                children = walks[s]
                cond = pend.conds[s]
                rows = descend(children, 0, truth)
                alive = len(rows) == len(truth)
                base = (pend.state * n_src + s) * n_depth
                # every row a token was tried from (the failing try included) is a trial of its
                # children: expected to go on with the sum of their conditional estimates
                for depth, (r, nxt) in enumerate(zip([0] + rows, rows + [None]), start=1):
                    if nxt is None and alive:
                        break
                    row = (base + (DEPTH_BAND[depth] if depth < 257 else n_depth - 1)) * n_q
                    for c in children[r].values():
                        cells.append(row + bisect_right(Q_EDGES, cond[c]))
                        hits.append(1.0 if c + 1 == nxt else 0.0)
                        expect.append(cond[c])
                    if nxt is None:
                        break
        if cells:
            for table, values in (
                (self.hits, hits),
                (self.nodes, expect),
                (shared.hits, hits),
                (shared.nodes, expect),
            ):
                np.add.at(table.reshape(-1), cells, values)
        self.cached = None
        return run
