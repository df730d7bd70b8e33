"""One draft policy for every drafter: which candidate draft nodes are worth their rows.

Drafters are sources of candidates: a DraftTree per source whose nodes carry the source's own
estimate of their chance to be accepted (the trie: its path frequencies; the n-gram pool: a prior
by depth and rank). The policy
  1. calibrates each node: p = the measured acceptance of nodes like it (same source, depth band,
     band of the source's own estimate, and whether the step before accepted 0, 1-3 or 4+ draft
     tokens: copying comes in stretches), learnt counterfactually: every candidate node of a step,
     sent or not, is scored once the tokens after its root are committed (a node is accepted iff
     its path is what was committed). A request's table starts from the drafter-wide one and
     learns faster. A band with little evidence leans on its depth's rate over all bands, and
     that on the source's own estimate (PRIOR_NODES pseudo-nodes each);
  2. merges the sources into one tree (a node several propose keeps its highest p; a node is
     never likelier than its parent), best first, so every prefix is a tree;
  3. sends the prefix of n nodes with the most expected tokens net of their cost,
        value(n) = sum(p_i, i < n) - price * (cost(1 + n + w) - cost(1 + w)),
     w = the step's other rows (a lookahead window), price = the request's recent tokens per unit
     of forward cost + MARGIN - 1: a row must buy what the step's time buys anyway, and a margin
     for the winner's curse (drafts go out where the estimate is high, so they are over-estimated
     on average). Rows on the cost curve's current stair are free (the forward pads them), so
     they fill with the next best nodes.
It also keeps, per source, how many accepted tokens only that source's nodes gave (a drafter may
stop asking a source whose work buys nothing).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .cost import CostModel
from .tree import ROOT, DraftTree, descend

DEPTH_EDGES = (2, 3, 5, 9, 17, 33)                  # depth bands: 1, 2, 3-4, 5-8, 9-16, 17-32, 33+
P_EDGES = (0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 0.95)   # bands of a source's own estimate
STREAK_EDGES = (1, 4)                               # draft tokens accepted last step: 0, 1-3, 4+
PRIOR_NODES = 1.0           # a prior weighs as this many scored nodes
DECAY, SHARED_DECAY = 0.9, 0.995   # per scored step: a request's table, the drafter-wide one
MARGIN = 2.0                # at rate 1, a draft must be worth this many times its cost
RATE_ALPHA = 0.1            # weight of the newest step in EMA(tokens) and EMA(cost)
MAX_PENDING = 8             # candidate sets awaiting their truth, per request
GAIN_ALPHA = 0.02           # EMA weight of a step in a source's own-token gain


def _band(edges: Sequence[float], x: float) -> int:
    return bisect_right(edges, x)


def streak_state(accepted: int) -> int:
    return _band(STREAK_EDGES, accepted)


def _calibrate(hits: np.ndarray, nodes: np.ndarray, d_hits: np.ndarray, d_nodes: np.ndarray,
               depth: int, own: float) -> float:
    """A node's acceptance: its band's rate, shrunk to its depth's rate over all bands, shrunk to
    the source's own estimate (hits/nodes: [depth band, p band] of one state and source)."""
    d = _band(DEPTH_EDGES, depth)
    b = _band(P_EDGES, own)
    rate_d = (d_hits[d] + PRIOR_NODES * own) / (d_nodes[d] + PRIOR_NODES)
    return float((hits[d, b] + PRIOR_NODES * rate_d) / (nodes[d, b] + PRIOR_NODES))


class PolicyStats:
    """What a drafter's requests have measured, together: the calibration table and each
    source's gain. Shared by the policy's requests (a new request starts from it)."""

    def __init__(self, n_sources: int):
        shape = (len(STREAK_EDGES) + 1, n_sources, len(DEPTH_EDGES) + 1, len(P_EDGES) + 1)
        self.hits = np.zeros(shape)
        self.nodes = np.zeros(shape)
        self.gain = [0.1] * n_sources   # optimistic: a source is measured before it can sit out


@dataclass
class _Pending:
    start: int                       # context length at the step (the truth starts there)
    state: int
    trees: list[DraftTree | None]    # per source, with the sources' own estimates
    depth: int                       # deepest node: the truth needed to score them all


@dataclass
class _Request:
    hits: np.ndarray
    nodes: np.ndarray
    pending: list[_Pending] = field(default_factory=list)
    state: int = 0
    tok_ema: float = 1.0
    cost_ema: float = 1.0
    sent: DraftTree | None = None    # what went out this step
    owners: list[int] = field(default_factory=list)   # per sent node: bitmask of its sources
    step_cost: float = 1.0
    tail: list[int] = field(default_factory=list)     # committed tokens from tail_start on
    tail_start: int = -1


class DraftPolicy:
    def __init__(self, n_sources: int, stats: PolicyStats | None = None):
        self.n_sources = n_sources
        self.stats = stats if stats is not None else PolicyStats(n_sources)
        self._requests: dict[str, _Request] = {}

    def begin(self, key: str) -> None:
        self._requests[key] = _Request(self.stats.hits.copy(), self.stats.nodes.copy())

    def end(self, key: str) -> None:
        self._requests.pop(key, None)

    # ------------------------------------------------------------------------ one step
    def state(self, key: str) -> int:
        """streak_state of the request's last step (2: it accepted 4+ draft tokens, copying)."""
        return self._requests[key].state

    def select(self, key: str, context: Sequence[int], candidates: Sequence[DraftTree | None], budget: int,
               cost: CostModel, extra_rows: int = 0, send_all: bool = False,
               score: bool = True) -> tuple[DraftTree, float]:
        """The draft to verify (best first, at most `budget` nodes) and its expected accepted
        tokens. candidates[s]: source s's tree with its own estimates (None: nothing).
        send_all: the whole merged tree when its value is positive (MindIE's static length).
        score=False: the candidates are not kept for calibration (a second look at a step)."""
        st = self._requests[key]
        self._sync(st, context)
        depth = max((max(t.depths()) for t in candidates if t), default=0)
        if score and depth:
            if len(st.pending) >= MAX_PENDING:
                st.pending.pop(0)
            st.pending.append(_Pending(len(context), st.state, list(candidates), depth))
        tree, owners = self._merge(st, candidates)
        n, expected = self._size(st, tree.probs, budget, cost, extra_rows, send_all)
        st.sent, st.owners = tree.truncated(n), owners[:n]
        st.step_cost = cost(1 + n + extra_rows)
        return st.sent, expected

    def observe(self, key: str, committed: Sequence[int], sources: Sequence[int] | None = None) -> int:
        """After verification, the tokens committed. Returns the draft tokens of the sent tree
        that were accepted. sources: those that offered candidates this step (default: all); their
        gains (accepted tokens only their nodes gave) are updated."""
        st = self._requests[key]
        if not committed:
            return 0
        st.tail += committed
        accepted = st.sent.follow(committed[:-1]) if st.sent else 0    # the bonus is never a draft
        rows = descend(st.sent.children(), 0, committed[:accepted]) if st.sent else []
        for s in (range(self.n_sources) if sources is None else sources):   # tokens only s's nodes gave
            own = sum(1 for r in rows if st.owners[r - 1] == 1 << s)
            self.stats.gain[s] += GAIN_ALPHA * (own - self.stats.gain[s])
        st.tok_ema += RATE_ALPHA * (1 + accepted - st.tok_ema)
        st.cost_ema += RATE_ALPHA * (st.step_cost - st.cost_ema)
        st.state = streak_state(accepted)
        st.sent, st.owners, st.step_cost = None, [], 1.0
        self._score(st)
        return accepted

    def skipped(self, key: str) -> None:
        """A step this policy did not draft (the drafter sat out): nothing was sent."""
        st = self._requests[key]
        st.sent, st.owners = None, []

    def calibrated(self, key: str, source: int, depth: int, own: float) -> float:
        """p of a node of `source` at `depth` whose source estimated `own`, for this request now."""
        st = self._requests[key]
        return _calibrate(st.hits[st.state, source], st.nodes[st.state, source],
                          st.hits[st.state, source].sum(-1), st.nodes[st.state, source].sum(-1), depth, own)

    # ------------------------------------------------------------------------ internals
    def _merge(self, st: _Request, candidates: Sequence[DraftTree | None]) -> tuple[DraftTree, list[int]]:
        """The sources' trees as one, calibrated, best first; and per node its sources (bitmask)."""
        index: dict[tuple[int, int], int] = {}      # (merged parent, token) -> merged node
        tokens: list[int] = []
        parents: list[int] = []
        probs: list[float] = []
        owners: list[int] = []
        depths: list[int] = []
        for s, tree in enumerate(candidates):
            if not tree:
                continue
            hits, nodes = st.hits[st.state, s], st.nodes[st.state, s]        # [depth band, p band]
            d_hits, d_nodes = hits.sum(-1), nodes.sum(-1)                    # [depth band]
            own = tree.probs or [1.0] * len(tree)
            here: list[int] = []                    # source node -> merged node
            for i, (tok, par) in enumerate(zip(tree.tokens, tree.parents)):
                mp = ROOT if par == ROOT else here[par]
                d = 1 if mp == ROOT else depths[mp] + 1
                p = _calibrate(hits, nodes, d_hits, d_nodes, d, own[i])
                if mp != ROOT and p > probs[mp]:
                    p = probs[mp]
                at = index.get((mp, tok))
                if at is None:
                    at = index[(mp, tok)] = len(tokens)
                    tokens.append(tok)
                    parents.append(mp)
                    probs.append(float(p))
                    owners.append(1 << s)
                    depths.append(d)
                else:
                    owners[at] |= 1 << s
                    if p > probs[at]:
                        probs[at] = float(p)
                here.append(at)
        if not tokens:
            return DraftTree(), []
        # best first, a parent before its children (p never grows down a path; on a tie the
        # shallower node goes first)
        order = sorted(range(len(tokens)), key=lambda i: (-probs[i], depths[i], i))
        new = {old: k for k, old in enumerate(order)}
        tree = DraftTree([tokens[i] for i in order],
                         [ROOT if parents[i] == ROOT else new[parents[i]] for i in order],
                         [probs[i] for i in order])
        return tree, [owners[i] for i in order]

    @staticmethod
    def _size(st: _Request, probs: list[float], budget: int, cost: CostModel, extra_rows: int,
              send_all: bool) -> tuple[int, float]:
        """How many of the best-first nodes to send, and their expected accepted tokens."""
        n_max = min(len(probs), budget)
        if n_max <= 0:
            return 0, 0.0
        price = st.tok_ema / st.cost_ema + MARGIN - 1.0
        table = cost.table
        base = table[1 + extra_rows] if 1 + extra_rows < len(table) else cost(1 + extra_rows)
        gain = best_v = best_gain = 0.0
        best_n = 0
        v = 0.0
        for i in range(n_max):
            gain += probs[i]
            rows = 2 + i + extra_rows
            v = gain - price * ((table[rows] if rows < len(table) else cost(rows)) - base)
            if v > best_v:
                best_n, best_v, best_gain = i + 1, v, gain
        if send_all and v > 0:
            return n_max, gain
        return best_n, best_gain

    @staticmethod
    def _sync(st: _Request, context: Sequence[int]) -> None:
        """The committed tokens a step's candidates are scored against: those committed since the
        oldest pending step (a gap the drafter was not told of, e.g. the prefill's token, too)."""
        if st.tail_start < 0 or not st.pending:
            st.tail, st.tail_start = [], len(context)
            return
        end = st.tail_start + len(st.tail)
        if len(context) > end:
            st.tail += context[end:]

    def _score(self, st: _Request) -> None:
        """Score every kept candidate set whose truth is now known, into both tables."""
        keep, done = [], []
        for pend in st.pending:
            at = pend.start - st.tail_start
            truth = st.tail[at:at + pend.depth]
            if len(truth) < pend.depth and not self._fell_off(pend, truth):
                keep.append(pend)
            else:
                done.append((pend, truth))
        st.pending = keep
        if keep:                        # only what the oldest pending step still needs is kept
            drop = keep[0].start - st.tail_start
            del st.tail[:drop]
            st.tail_start += drop
        if not done:
            return
        shared = self.stats
        st.hits *= DECAY
        st.nodes *= DECAY
        shared.hits *= SHARED_DECAY
        shared.nodes *= SHARED_DECAY
        for pend, truth in done:
            for s, tree in enumerate(pend.trees):
                if not tree:
                    continue
                on_path = set(r - 1 for r in descend(tree.children(), 0, truth))
                own = tree.probs or [1.0] * len(tree)
                for i, d in enumerate(tree.depths()):
                    b = (pend.state, s, _band(DEPTH_EDGES, d), _band(P_EDGES, own[i]))
                    hit = 1.0 if i in on_path else 0.0
                    st.hits[b] += hit
                    st.nodes[b] += 1.0
                    shared.hits[b] += hit
                    shared.nodes[b] += 1.0

    @staticmethod
    def _fell_off(pend: _Pending, truth: Sequence[int]) -> bool:
        """Every tree's walk along the truth so far has stopped: all its nodes are decided."""
        return all(not t or len(descend(t.children(), 0, truth)) < len(truth) for t in pend.trees)
