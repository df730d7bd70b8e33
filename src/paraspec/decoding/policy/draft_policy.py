"""One draft policy for every drafter: which candidate draft nodes are worth their rows.

Drafters are sources of candidates: a DraftTree per source whose nodes carry the source's own
estimate of their chance to be accepted (the trie: its path frequencies; the n-gram pool: a prior
by depth and rank). The policy
  1. calibrates each node (calibration.py): the source's conditional estimate q (the node's own
     over its parent's) times a factor measured, counterfactually, for nodes like it (source,
     depth, band of q, the streak state). A node's p is its parent's times the calibrated q (at
     most 1);
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
It also keeps, per source, how many accepted tokens only that source's nodes gave, drafter-wide
and per request (a drafter may stop asking a source whose work buys nothing).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from .calibration import (
    DEPTH_BAND,
    DEPTH_EDGES,
    Q_EDGES,
    STREAK_EDGES,
    Calibration,
    PendingSet,
    PolicyStats,
    band,
    conditional,
    streak_state,
)
from .cost import CostModel
from ..contract.stats import NO_MATCH, ROWS_TOO_DEAR
from ..contract.tree import ROOT, DraftTree, descend

MARGIN = 2.0  # at rate 1, a draft must be worth this many times its cost
COPY_MARGIN = 1.1  # ... while the text copies (see _size)
RATE_ALPHA = 0.1  # weight of the newest step in EMA(tokens) and EMA(cost)
GAIN_ALPHA = 0.02  # EMA weight of a step in a source's own-token gain
REQUEST_GAIN_ALPHA = 0.1  # ... in one request's (it follows the request's text within ~10 steps)


@dataclass
class _Request:
    calibration: Calibration
    state: int = 0  # streak_state: calibration's and the margin's
    tok_ema: float = 1.0
    cost_ema: float = 1.0
    sent: DraftTree | None = None  # what went out this step
    owners: list[int] = field(default_factory=list)  # per sent node: bitmask of its sources
    step_cost: float = 1.0
    reason: str | None = None  # why the last select sent nothing (None: it sent a draft)
    gain: list[float] = field(default_factory=list)  # per source: stats.gain, this request's own


class DraftPolicy:
    def __init__(self, n_sources: int, stats: PolicyStats | None = None):
        self.n_sources = n_sources
        self.stats = stats if stats is not None else PolicyStats(n_sources)
        self._requests: dict[str, _Request] = {}

    def begin(self, key: str) -> None:
        self._requests[key] = _Request(Calibration.like(self.stats), gain=list(self.stats.gain))

    def end(self, key: str) -> None:
        self._requests.pop(key, None)

    def gain(self, key: str, source: int) -> float:
        """Accepted tokens a step that only `source`'s nodes gave, in this request's recent steps
        (it starts from the drafter-wide figure, stats.gain)."""
        return self._requests[key].gain[source]

    # ------------------------------------------------------------------------ one step
    def state(self, key: str) -> int:
        """streak_state of the request's last step (2, copying: it accepted 4+ draft tokens, or
        the text has followed a candidate tree, sent or not, for 4+ tokens)."""
        return self._requests[key].state

    def select(
        self,
        key: str,
        context: Sequence[int],
        candidates: Sequence[DraftTree | None],
        budget: int,
        cost: CostModel,
        extra_rows: int = 0,
        send_all: int = 0,
        score: bool = True,
    ) -> tuple[DraftTree, float]:
        """The draft to verify (best first, at most `budget` nodes) and its expected accepted
        tokens. candidates[s]: source s's tree with its own estimates (None: nothing).
        send_all: at least the first send_all nodes when together their value is positive
        (MindIE's static draft length). score=False: the candidates are not kept for
        calibration; a second scored look at the same step replaces the first's candidates."""
        tree, owners = self.merged(key, context, candidates, score)
        n, expected = self._size(
            self._requests[key], tree.probs, budget, cost, extra_rows, send_all
        )
        draft = tree.truncated(n)
        self.sent(key, draft, owners[:n], cost(1 + n + extra_rows))
        self._requests[key].reason = (
            None if n else (ROWS_TOO_DEAR if len(tree) and budget > 0 else NO_MATCH)
        )
        return draft, expected

    def reason(self, key: str) -> str | None:
        """Why the request's last select sent nothing: NO_MATCH (no candidate) or ROWS_TOO_DEAR
        (candidates, none worth its rows); None when it sent a draft."""
        return self._requests[key].reason

    def merged(
        self,
        key: str,
        context: Sequence[int],
        candidates: Sequence[DraftTree | None],
        score: bool = True,
    ) -> tuple[DraftTree, list[int]]:
        """select's first half, for a caller that sizes drafts itself (ASPD's branches share one
        forward): the candidates calibrated and merged, best first, and per node its sources
        (bitmask). Report what went out with sent()."""
        st = self._requests[key]
        st.calibration.sync(context)
        tree, owners, conds, depth = self._merge(st, candidates)
        if score and depth:
            st.calibration.keep(PendingSet(len(context), st.state, list(candidates), conds, depth))
        return tree, owners

    def sent(self, key: str, draft: DraftTree, owners: list[int], step_cost: float) -> None:
        """What was verified this step (a best-first prefix of merged()'s tree and its owners)
        and the step's cost relative to one row: observe() scores against it."""
        st = self._requests[key]
        st.sent, st.owners, st.step_cost = draft, owners, step_cost

    def observe(
        self, key: str, committed: Sequence[int], sources: Sequence[int] | None = None
    ) -> int:
        """After verification, the tokens committed. Returns the draft tokens of the sent tree
        that were accepted. sources: those that offered candidates this step (default: all); their
        gains (accepted tokens only their nodes gave) are updated."""
        st = self._requests[key]
        if not committed:
            return 0
        st.calibration.tail += committed
        accepted = st.sent.follow(committed[:-1]) if st.sent else 0  # the bonus is never a draft
        rows = descend(st.sent.children(), 0, committed[:accepted]) if st.sent else []
        # tokens only s's nodes gave
        for s in range(self.n_sources) if sources is None else sources:
            own = sum(1 for r in rows if st.owners[r - 1] == 1 << s)
            self.stats.gain[s] += GAIN_ALPHA * (own - self.stats.gain[s])
            st.gain[s] += REQUEST_GAIN_ALPHA * (own - st.gain[s])
        st.tok_ema += RATE_ALPHA * (1 + accepted - st.tok_ema)
        st.cost_ema += RATE_ALPHA * (st.step_cost - st.cost_ema)
        st.sent, st.owners, st.step_cost = None, [], 1.0
        # a copy is the text's, not only the sent draft's: where the text has followed a candidate
        # tree for a copy's length (sent or not: its rows priced too dear, the gate closed), the
        # next step is a copying one, or where rows are dear a copy that starts unverified would
        # stay unverified to its end. Shorter runs leave the state to the sent draft: by chance a
        # text follows some branch for a token or two, and that is no streak
        run = st.calibration.score(self.stats)
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
        f = st.calibration.factors(st.state, self.stats)[source][band(DEPTH_EDGES, depth)][
            band(Q_EDGES, own)
        ]
        return min(1.0, own * f)

    # ------------------------------------------------------------------------ internals
    def _merge(
        self, st: _Request, candidates: Sequence[DraftTree | None]
    ) -> tuple[DraftTree, list[int], list[list[float]], int]:
        """The sources' trees as one, calibrated, best first; per node its sources (bitmask);
        per source its nodes' conditional estimates; the deepest node's depth."""
        index: dict[tuple[int, int], int] = {}  # (merged parent, token) -> merged node
        tokens: list[int] = []
        parents: list[int] = []
        probs: list[float] = []
        owners: list[int] = []
        depths: list[int] = []
        conds: list[list[float]] = []
        depth_band, q_edges = DEPTH_BAND, Q_EDGES
        for s, tree in enumerate(candidates):
            if not tree:
                conds.append([])
                continue
            factor = st.calibration.factors(st.state, self.stats)[s]
            own = tree.probs or [1.0] * len(tree)
            cond = conditional(tree, own)
            conds.append(cond)
            here: list[int] = []  # source node -> merged node
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
        tree = DraftTree(
            [tokens[i] for i in order],
            [ROOT if parents[i] == ROOT else new[parents[i]] for i in order],
            [probs[i] for i in order],
        )
        return tree, [owners[i] for i in order], conds, max(depths)

    @staticmethod
    def _size(
        st: _Request,
        probs: list[float],
        budget: int,
        cost: CostModel,
        extra_rows: int,
        send_all: int,
    ) -> tuple[int, float]:
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
