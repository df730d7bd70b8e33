"""One draft policy for every drafter: which candidate draft nodes are worth their rows.

Drafters are sources of candidates: a DraftTree per source whose nodes carry the source's own
estimate of their chance to be accepted (the trie: its path frequencies; the n-gram pool: a prior
by depth and rank). The policy
  1. calibrates each node: the source's conditional estimate q (the node's own estimate over
     its parent's: the chance the text goes on into it, given it reached the parent) times a
     factor measured for nodes like it: same source, depth band and band of q, and whether the
     step before accepted 0, 1-3 or 4+ draft tokens (copying comes in stretches). A node's p is
     its parent's times the calibrated q (at most 1). Measured counterfactually: every candidate
     tree of a step, sent or not, is walked along the tokens committed after its root; each
     child of a node the walk reaches was a chance for the text to go on (expected: its q; a
     hit if the text went into it). A factor is hits over expected, leaning on its depth's factor
     over all bands where evidence is thin, the request's on the drafter-wide one (all
     requests, forgotten more slowly), and that on the source's own estimate (PRIOR_TRIALS
     pseudo-trials each);
  2. merges the sources into one tree (a node several propose keeps its highest p; a node is
     never likelier than its parent), best first, so every prefix is a tree;
  3. sends the prefix of n nodes with the most expected tokens net of their cost,
        value(n) = sum(p_i, i < n) - price * (cost(1 + n + w) - cost(1 + w)),
     w = the step's other rows (a lookahead window), price = the request's recent tokens per unit
     of forward cost + MARGIN - 1: a row must buy what the step's time buys anyway, and a margin
     for the winner's curse (drafts go out where the estimate is high, so they are over-estimated
     on average). While the text copies (streak state 2) the margin is COPY_MARGIN: there the
     estimates are measured on the copy's own steps (sent or not), the curse is small, and with
     the full margin a CPU whose rows are dear (docs/design-notes.md, figures) would verify not
     even a certain copy. Rows on the cost curve's current stair are free (the forward pads
     them), so they fill with the next best nodes.
It also keeps, per source, how many accepted tokens only that source's nodes gave (a drafter may
stop asking a source whose work buys nothing).
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .cost import CostModel
from ..contract.stats import NO_MATCH, ROWS_TOO_DEAR
from ..contract.tree import ROOT, DraftTree, descend

DEPTH_EDGES = (2, 3, 5, 9, 17, 33)                  # depth bands: 1, 2, 3-4, 5-8, 9-16, 17-32, 33+
Q_EDGES = (0.1, 0.2, 0.3, 0.45, 0.65, 0.85)         # bands of a source's conditional estimate
STREAK_EDGES = (1, 4)                               # draft tokens accepted last step: 0, 1-3, 4+
PRIOR_TRIALS = 1.0          # the source's own estimate weighs as this many expected continuations
DECAY, SHARED_DECAY = 0.9, 0.995   # per scored step: a request's table, the drafter-wide one
MARGIN = 2.0                # at rate 1, a draft must be worth this many times its cost
COPY_MARGIN = 1.1           # ... while the text copies (see _size)
RATE_ALPHA = 0.1            # weight of the newest step in EMA(tokens) and EMA(cost)
MAX_PENDING = 8             # candidate sets awaiting their truth, per request
GAIN_ALPHA = 0.02           # EMA weight of a step in a source's own-token gain


def _band(edges: Sequence[float], x: float) -> int:
    return bisect_right(edges, x)


_DEPTH_BAND = [bisect_right(DEPTH_EDGES, d) for d in range(257)]   # hot loops index this


def streak_state(accepted: int) -> int:
    return _band(STREAK_EDGES, accepted)


def conditional(tree: DraftTree, own: Sequence[float]) -> list[float]:
    """Each node's estimate given its parent is accepted: its own over its parent's."""
    return [o if par == ROOT else (o / own[par] if own[par] > 0 else 0.0) for o, par in zip(own, tree.parents)]


class PolicyStats:
    """What a drafter's requests have measured, together: the calibration table and each
    source's gain. Shared by the policy's requests (a new request starts from it)."""

    def __init__(self, n_sources: int):
        shape = (len(STREAK_EDGES) + 1, n_sources, len(DEPTH_EDGES) + 1, len(Q_EDGES) + 1)
        self.hits = np.zeros(shape)             # continuations accepted
        self.nodes = np.zeros(shape)            # continuations expected (sum of estimates)
        self.gain = [0.1] * n_sources   # optimistic: a source is measured before it can sit out


@dataclass
class _Pending:
    start: int                       # context length at the step (the truth starts there)
    state: int
    trees: list[DraftTree | None]    # per source, with the sources' own estimates
    conds: list[list[float]]         # per source, each node's conditional estimate
    depth: int                       # deepest node: the truth needed to score them all
    children: list | None = None     # per source, its tree's children() (walked every observe)

    def walks(self) -> list:
        if self.children is None:
            self.children = [t.children() if t else None for t in self.trees]
        return self.children


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
    factors: list | None = None      # [state] -> None or [source][depth band][q band], from the tables
    reason: str | None = None        # why the last select sent nothing (None: it sent a draft)


class DraftPolicy:
    def __init__(self, n_sources: int, stats: PolicyStats | None = None):
        self.n_sources = n_sources
        self.stats = stats if stats is not None else PolicyStats(n_sources)
        self._requests: dict[str, _Request] = {}

    def begin(self, key: str) -> None:
        self._requests[key] = _Request(np.zeros_like(self.stats.hits), np.zeros_like(self.stats.nodes))

    def end(self, key: str) -> None:
        self._requests.pop(key, None)

    # ------------------------------------------------------------------------ one step
    def state(self, key: str) -> int:
        """streak_state of the request's last step (2, copying: it accepted 4+ draft tokens, or
        the text has followed a candidate tree, sent or not, for 4+ tokens)."""
        return self._requests[key].state

    def select(self, key: str, context: Sequence[int], candidates: Sequence[DraftTree | None], budget: int,
               cost: CostModel, extra_rows: int = 0, send_all: int = 0,
               score: bool = True) -> tuple[DraftTree, float]:
        """The draft to verify (best first, at most `budget` nodes) and its expected accepted
        tokens. candidates[s]: source s's tree with its own estimates (None: nothing).
        send_all: at least the first send_all nodes when together their value is positive
        (MindIE's static draft length). score=False: the candidates are not kept for
        calibration; a second scored look at the same step replaces the first's candidates."""
        tree, owners = self.merged(key, context, candidates, score)
        n, expected = self._size(self._requests[key], tree.probs, budget, cost, extra_rows, send_all)
        draft = tree.truncated(n)
        self.sent(key, draft, owners[:n], cost(1 + n + extra_rows))
        self._requests[key].reason = None if n else (ROWS_TOO_DEAR if len(tree) and budget > 0 else NO_MATCH)
        return draft, expected

    def reason(self, key: str) -> str | None:
        """Why the request's last select sent nothing: NO_MATCH (no candidate) or ROWS_TOO_DEAR
        (candidates, none worth its rows); None when it sent a draft."""
        return self._requests[key].reason

    def merged(self, key: str, context: Sequence[int], candidates: Sequence[DraftTree | None],
               score: bool = True) -> tuple[DraftTree, list[int]]:
        """select's first half, for a caller that sizes drafts itself (ASPD's branches share one
        forward): the candidates calibrated and merged, best first, and per node its sources
        (bitmask). Report what went out with sent()."""
        st = self._requests[key]
        self._sync(st, context)
        tree, owners, conds, depth = self._merge(st, candidates)
        if score and depth:
            if st.pending and st.pending[-1].start == len(context):
                st.pending.pop()            # a second look at the same step replaces the first
            if len(st.pending) >= MAX_PENDING:
                st.pending.pop(0)
            st.pending.append(_Pending(len(context), st.state, list(candidates), conds, depth))
        return tree, owners

    def sent(self, key: str, draft: DraftTree, owners: list[int], step_cost: float) -> None:
        """What was verified this step (a best-first prefix of merged()'s tree and its owners)
        and the step's cost relative to one row: observe() scores against it."""
        st = self._requests[key]
        st.sent, st.owners, st.step_cost = draft, owners, step_cost

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
        st.sent, st.owners, st.step_cost = None, [], 1.0
        # a copy is the text's, not only the sent draft's: where the text has followed a candidate
        # tree for a copy's length (sent or not: its rows priced too dear, the gate closed), the
        # next step is a copying one, or where rows are dear a copy that starts unverified would
        # stay unverified to its end. Shorter runs leave the state to the sent draft: by chance a
        # text follows some branch for a token or two, and that is no streak
        run = self._score(st)
        st.state = streak_state(accepted if run < STREAK_EDGES[-1] else max(accepted, run))
        return accepted

    def skipped(self, key: str) -> None:
        """A step this policy did not draft (the drafter sat out): nothing was sent."""
        st = self._requests[key]
        st.sent, st.owners = None, []

    def calibrated(self, key: str, source: int, depth: int, own: float) -> float:
        """The chance of a node of `source` at `depth` whose source estimated its continuation at
        `own`, given its parent is accepted, for this request now."""
        st = self._requests[key]
        f = self._factors(st)[source][_band(DEPTH_EDGES, depth)][_band(Q_EDGES, own)]
        return min(1.0, own * f)

    def _factors(self, st: _Request) -> list:
        """Calibration factors [source][depth band][q band] of the request's streak state now,
        recomputed after the tables change (see the module docstring). Only the state a step
        is in: the numpy work is per operation, not per element, and it runs every step."""
        s = st.state
        if st.factors is None:
            st.factors = [None] * (len(STREAK_EDGES) + 1)
        if st.factors[s] is None:
            k, sh, se, h, n = PRIOR_TRIALS, self.stats.hits[s], self.stats.nodes[s], st.hits[s], st.nodes[s]
            shared_d = (sh.sum(-1) + k) / (se.sum(-1) + k)                        # [src, depth]
            shared = (sh + k * shared_d[..., None]) / (se + k)                    # ... x q band
            own_d = (h.sum(-1) + k * shared_d) / (n.sum(-1) + k)
            st.factors[s] = ((h + k * own_d[..., None] * shared / shared_d[..., None]) / (n + k)).tolist()
        return st.factors[s]

    # ------------------------------------------------------------------------ internals
    def _merge(self, st: _Request, candidates: Sequence[DraftTree | None]
               ) -> tuple[DraftTree, list[int], list[list[float]], int]:
        """The sources' trees as one, calibrated, best first; per node its sources (bitmask);
        per source its nodes' conditional estimates; the deepest node's depth."""
        index: dict[tuple[int, int], int] = {}      # (merged parent, token) -> merged node
        tokens: list[int] = []
        parents: list[int] = []
        probs: list[float] = []
        owners: list[int] = []
        depths: list[int] = []
        conds: list[list[float]] = []
        depth_band, q_edges = _DEPTH_BAND, Q_EDGES
        for s, tree in enumerate(candidates):
            if not tree:
                conds.append([])
                continue
            factor = self._factors(st)[s]
            own = tree.probs or [1.0] * len(tree)
            cond = conditional(tree, own)
            conds.append(cond)
            here: list[int] = []                    # source node -> merged node
            bit, get, add_here = 1 << s, index.get, here.append
            for tok, par, c in zip(tree.tokens, tree.parents, cond):
                if par == ROOT:
                    mp, d, above = ROOT, 1, 1.0
                else:
                    mp = here[par]
                    d, above = depths[mp] + 1, probs[mp]
                q = c * factor[depth_band[d] if d < 257 else -1][bisect_right(q_edges, c)]
                p = above * (q if q < 1.0 else 1.0)
                at = get((mp, tok))
                if at is None:
                    at = index[(mp, tok)] = len(tokens)
                    tokens.append(tok)
                    parents.append(mp)
                    probs.append(p)
                    owners.append(bit)
                    depths.append(d)
                else:
                    owners[at] |= bit
                    if p > probs[at]:
                        probs[at] = p
                add_here(at)
        if not tokens:
            return DraftTree(), [], conds, 0
        # best first, a parent before its children (p never grows down a path; on a tie the
        # shallower node goes first): two stable sorts with C-level keys, i.e. by (-p, depth, i)
        order = sorted(range(len(tokens)), key=depths.__getitem__)
        neg = [-p for p in probs]
        order.sort(key=neg.__getitem__)
        new = [0] * len(order)
        for k, old in enumerate(order):
            new[old] = k
        tree = DraftTree([tokens[i] for i in order],
                         [ROOT if parents[i] == ROOT else new[parents[i]] for i in order],
                         [probs[i] for i in order])
        return tree, [owners[i] for i in order], conds, max(depths)

    @staticmethod
    def _size(st: _Request, probs: list[float], budget: int, cost: CostModel, extra_rows: int,
              send_all: int) -> tuple[int, float]:
        """How many of the best-first nodes to send, and their expected accepted tokens."""
        n_max = min(len(probs), budget)
        if n_max <= 0:
            return 0, 0.0
        margin = COPY_MARGIN if st.state == len(STREAK_EDGES) else MARGIN
        price = st.tok_ema / st.cost_ema + margin - 1.0
        table = cost.table
        base = table[1 + extra_rows] if 1 + extra_rows < len(table) else cost(1 + extra_rows)
        gain = best_v = best_gain = 0.0
        best_n = 0
        whole = min(send_all, n_max)
        for i in range(n_max):
            gain += probs[i]
            rows = 2 + i + extra_rows
            v = gain - price * ((table[rows] if rows < len(table) else cost(rows)) - base)
            if v > best_v or (i + 1 == whole and v > 0 and best_n < whole):
                best_n, best_v, best_gain = i + 1, max(v, best_v), gain
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

    def _score(self, st: _Request) -> int:
        """Score every kept candidate set whose truth is now known, into both tables. Returns how
        many committed tokens the text has followed a candidate tree for, up to now (a copy
        running, sent or not)."""
        keep, done = [], []
        run = 0
        for pend in st.pending:
            at = pend.start - st.tail_start
            truth = st.tail[at:at + pend.depth]
            fell_off = self._fell_off(pend, truth)
            if not fell_off and len(truth) == len(st.tail) - at:    # followed to the last token
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
            at = pend.start - st.tail_start
            done.append((pend, st.tail[at:at + pend.depth]))
        st.pending = keep
        if keep:                        # only what the oldest pending step still needs is kept
            drop = keep[0].start - st.tail_start
            del st.tail[:drop]
            st.tail_start += drop
        if not done:
            return run
        shared = self.stats
        st.hits *= DECAY
        st.nodes *= DECAY
        shared.hits *= SHARED_DECAY
        shared.nodes *= SHARED_DECAY
        # the trials, as flat table indices, added at once (np.add.at adds in order, as a loop
        # of single-element additions would, without their per-element cost)
        _, n_src, n_depth, n_q = st.hits.shape
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
                    row = (base + (_DEPTH_BAND[depth] if depth < 257 else n_depth - 1)) * n_q
                    for c in children[r].values():
                        cells.append(row + bisect_right(Q_EDGES, cond[c]))
                        hits.append(1.0 if c + 1 == nxt else 0.0)
                        expect.append(cond[c])
                    if nxt is None:
                        break
        if cells:
            for table, values in ((st.hits, hits), (st.nodes, expect), (shared.hits, hits), (shared.nodes, expect)):
                np.add.at(table.reshape(-1), cells, values)
        st.factors = None
        return run

    @staticmethod
    def _fell_off(pend: _Pending, truth: Sequence[int]) -> bool:
        """Every tree's walk along the truth so far has stopped: all its nodes are decided."""
        return all(c is None or len(descend(c, 0, truth)) < len(truth) for c in pend.walks())
