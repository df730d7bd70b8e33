"""Cost-aware choice between drafting configurations, from measured acceptance.

Verifying more query rows is nearly free on a memory-bound machine and not free at all on a
compute-bound one (this 2-core CPU, SmolLM2-135M bf16: t(16)/t(1) ~ 1.55, t(32)/t(1) ~ 2.4).
Whether a lookahead window or a second drafter pays therefore depends on the machine and on the
text: copyable stretches reward drafts, novel ones do not. `ArmSelector` runs each configuration ("arm") for short
epochs, scores it by tokens emitted per unit of forward cost, keeps using the best and retries
the others now and then; what one request learns (ArmStats) is where the next one starts.
Epochs, not single steps, because a lookahead window's benefit is delayed: the n-grams it
harvests in one step are accepted a few steps later.

Within one configuration, how much to draft is learnt counterfactually, which needs no
exploration: every candidate is kept until the text it guessed is committed, and then what any
choice would have had accepted is known. `DraftSizer` picks lookahead's (count, depth) of pool
candidates that way, `TreeChooser` the hybrid's tree (trie, lookahead, merged).
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# t(k)/t(1) measured for SmolLM2-135M bf16 on the 2-core CPU (research/cpu-measurements.md,
# made monotone); engines pass their own curve through set_forward_cost().
DEFAULT_FORWARD_COST = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.17, 32: 1.71, 64: 2.82}


class CostModel:
    """Forward cost of a query of k rows relative to one row, interpolated (and extrapolated
    linearly past the last measured size)."""

    def __init__(self, curve: dict[int, float] | None = None):
        curve = dict(curve or DEFAULT_FORWARD_COST)
        ks = sorted(curve)
        vals = np.maximum.accumulate([curve[k] for k in ks])
        self._ks, self._vals = np.array(ks, dtype=float), vals
        if len(ks) >= 2:
            self._slope = max((vals[-1] - vals[-2]) / (ks[-1] - ks[-2]), 0.0)
        else:
            self._slope = 0.0
        self._table = [float(self._eval(k)) for k in range(0, 257)]
        # rows that can join a query of k rows at no cost (up to the top of k's stair)
        self._free = [0] * len(self._table)
        for k in range(len(self._table) - 2, -1, -1):
            if self._table[k + 1] <= self._table[k]:
                self._free[k] = self._free[k + 1] + 1

    def _eval(self, k: int) -> float:
        if k <= self._ks[-1]:
            return float(np.interp(max(k, 1), self._ks, self._vals))
        return float(self._vals[-1] + self._slope * (k - self._ks[-1]))

    def __call__(self, rows: int) -> float:
        return self._table[rows] if rows < len(self._table) else self._eval(rows)

    @property
    def table(self) -> list[float]:
        """table[k]: the cost of k rows, k up to 256 (a plain list, for hot loops)."""
        return self._table

    def free_rows(self, rows: int) -> int:
        """How many rows can join a query of `rows` at no cost: the forward pads its rows (to a
        multiple of 4 on this engine), so a measured curve is a staircase and the rows up to the
        top of a stair are computed anyway."""
        return self._free[rows] if rows < len(self._free) else 0


# Before any evidence, a Jacobi window is supposed to add this share of tokens per step:
# optimistic (measured here on top of the trie and the pool: 10-20 %), so that where its rows cost
# less than that it is tried at once, and where they cost more (this CPU: 1.5-1.8x a step) it
# waits, as a loser would, instead of costing an engine's first request its exploration.
WINDOW_PRIOR_GAIN = 0.3


def window_prior(cost: CostModel, window_rows: int, base_rows: int = 4) -> float:
    """A window step's tokens per unit cost relative to the same step without it, before
    evidence: (1 + WINDOW_PRIOR_GAIN) over what its rows add to a small step."""
    return (1.0 + WINDOW_PRIOR_GAIN) * cost(base_rows) / cost(base_rows + window_rows)


@dataclass
class ArmStats:
    """What all requests of one drafter have learned about its arms: each arm's value (tokens
    per unit of forward cost, smoothed over every request's epochs) and when a losing arm is due
    for another try. Shared by the requests' selectors, so a new request starts on the arm that
    has been winning and exploration is paced over all requests' epochs: whether a lookahead
    window pays is mostly a property of the machine's cost curve, and short requests should not
    each pay to learn it again."""

    n_arms: int
    retry_after: int = 8      # epochs (of any request) before a losing arm is tried again ...
    max_wait: int = 256       # ... doubling while it keeps losing, up to this many
    alpha: float = 0.3
    value: list[float] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    last_epoch: list[int] = field(default_factory=list)
    wait: list[int] = field(default_factory=list)
    epoch: int = 0
    supposed: list[bool] = field(default_factory=list)   # value[i] is a prior, not evidence

    def __post_init__(self) -> None:
        n = self.n_arms
        self.value, self.epochs = [0.0] * n, [0] * n
        self.supposed = [False] * n
        self.last_epoch, self.wait = [-1] * n, [self.retry_after] * n

    def best(self) -> int | None:
        tried = [i for i in range(self.n_arms) if self.epochs[i]]
        return max(tried, key=lambda i: self.value[i]) if tried else None

    def suppose(self, arm: int, value: float, reference: float = 1.0) -> None:
        """A prior for an arm that has no evidence yet, where the arm it competes with is
        expected to score `reference`: an arm the prior puts behind (value < reference) counts
        as if one epoch had scored `value` and waits before its first try, as a loser would,
        instead of being explored in its turn (trying a window that costs 1.7x a step to learn
        that it does not pay costs a request real time). Its first real epoch replaces the
        prior. A prior at or above the reference changes nothing: the arm is explored in turn."""
        if self.epochs[arm] or self.supposed[arm] or value >= reference:
            return
        self.supposed[arm] = True
        self.value[arm] = value
        self.epochs[arm] = 1
        self.last_epoch[arm] = self.epoch
        self.wait[arm] = self.retry_after * (4 if value < 0.8 * reference else 2)

    def due(self) -> int | None:
        """An arm to explore now: an untried one (index order), else a loser whose wait is over.
        The caller claims it, so concurrent requests do not all explore at once."""
        untried = [i for i in range(self.n_arms) if not self.epochs[i]]
        if untried:
            return untried[0]
        best = self.best()
        stale = [i for i in range(self.n_arms)
                 if i != best and self.epoch - self.last_epoch[i] > self.wait[i]]
        return stale[0] if stale else None

    def claim(self, arm: int) -> None:
        self.last_epoch[arm] = self.epoch

    def record(self, arm: int, score: float) -> None:
        """One finished epoch of `arm` (any request) that scored `score` tokens per unit cost."""
        if self.supposed[arm]:      # a prior, not evidence: the first real score replaces it
            self.supposed[arm] = False
            self.epochs[arm] = 0
        self.value[arm] = score if not self.epochs[arm] else \
            self.alpha * score + (1 - self.alpha) * self.value[arm]
        self.epochs[arm] += 1
        self.last_epoch[arm] = self.epoch
        self.epoch += 1
        best = self.best()
        if arm == best:
            self.wait[arm] = self.retry_after
        else:   # lost again: wait twice as long before the next try, 4x if it lost by far
            far = self.value[arm] < 0.8 * self.value[best]
            self.wait[arm] = min(self.wait[arm] * (4 if far else 2), self.max_wait)


@dataclass
class ArmSelector:
    """Per-request epoch-greedy choice among `n_arms` drafting configurations.

    Each epoch of `epoch_steps` steps runs one arm; its score is tokens / cost summed over the
    epoch, recorded both in this request's own values and in the drafter-wide `shared` ArmStats.
    The next epoch explores whatever `shared` says is due (untried arms first, in index order:
    put the configuration the algorithm is named for at 0), else runs the best arm by this
    request's own values where it has them (its text may differ from the others') and by the
    shared values elsewhere."""

    n_arms: int
    epoch_steps: int = 6
    retry_after: int = 8
    alpha: float = 0.5
    shared: ArmStats | None = None
    own: list[float | None] = field(default_factory=list)
    current: int = 0
    steps: int = 0
    tokens: float = 0.0
    cost: float = 0.0
    base_tokens: float = 0.0
    base_cost: float = 0.0

    def __post_init__(self) -> None:
        if self.shared is None:
            self.shared = ArmStats(self.n_arms, retry_after=self.retry_after)
        self.own = [None] * self.n_arms
        self.current = self._next()

    def choose(self) -> int:
        return self.current

    def update(self, tokens: float, cost: float, base: tuple[float, float] | None = None) -> None:
        """Record one step of the current arm: tokens emitted and its forward cost.

        Paired evidence: `base` = (tokens, cost) the same step would have had in a reference
        configuration (known when the reference's draft was part of the verified tree). An epoch
        given bases scores tokens/cost relative to the reference's on the same text, which is
        far less noisy than comparing epochs that ran over different stretches of text."""
        self.tokens += tokens
        self.cost += cost
        if base is not None:
            self.base_tokens += base[0]
            self.base_cost += base[1]
        self.steps += 1
        if self.steps >= self.epoch_steps:
            score = self.tokens / max(self.cost, 1e-9)
            if self.base_tokens:
                score /= self.base_tokens / max(self.base_cost, 1e-9)
            old = self.own[self.current]
            self.own[self.current] = score if old is None else self.alpha * score + (1 - self.alpha) * old
            self.shared.record(self.current, score)
            self.steps, self.tokens, self.cost = 0, 0.0, 0.0
            self.base_tokens = self.base_cost = 0.0
            self.current = self._next()

    def _next(self) -> int:
        due = self.shared.due()
        if due is not None:
            self.shared.claim(due)
            return due
        sh = self.shared

        def value(i: int) -> float:
            if self.own[i] is not None:
                return self.own[i]
            return sh.value[i] if sh.epochs[i] else float("-inf")
        return max(range(self.n_arms), key=value)


class _AfterHit:
    """Whether the step before accepted a draft token, read from how far the context grew
    between two steps (copying comes in stretches: right after a hit, the next guess is far
    likelier to be right). Counterfactual learners keep their tables apart by it."""

    after_hit: int = 0
    _last_len: int = -1      # context length at the last step

    def _step(self, context_len: int) -> int:
        self.after_hit = int(self._last_len >= 0 and context_len - self._last_len > 1)
        self._last_len = context_len
        return self.after_hit

    def skipped(self, context_len: int) -> None:
        """A step at `context_len` that did not consult this learner: the next one's state is
        then that step's, not a jump over several."""
        self._last_len = context_len


ESTIMATE_BANDS = (0.5, 1.5, 3.0)   # a drafter's estimates in these bands are calibrated apart


class TreeChooser(_AfterHit):
    """Which of a step's candidate draft trees to verify (the trie's, lookahead's, both merged):
    the one with the most tokens per unit of forward cost, (1 + expected accepted) / cost(rows).

    Each drafter states what it expects its tree to get accepted (the trie from its path counts,
    lookahead from its learnt (count, depth) table): that carries the step's own confidence, a
    deep trie draft after a long match is right far more often than a short one. The chooser
    calibrates those statements per source, as the ratio of tokens accepted to tokens
    expected, learnt counterfactually: every candidate tree of a step is kept until the tokens
    after its root are committed, and then how far the committed text follows each tree is
    known exactly, whichever was verified. The ratio is kept per band of the estimate (a
    calibration curve: the trie over-promises on weak matches and not on strong ones) and apart
    for steps after a hit and after a miss; a request starts from the drafter-wide sums
    (`shared`), which learn more slowly."""

    def __init__(self, shared: np.ndarray, alpha: float = 0.15, shared_alpha: float = 0.02):
        self.shared = shared                 # [after a miss / a hit, accepted / expected, source, band]
        self.table = shared.copy()
        self.alpha, self.shared_alpha = alpha, shared_alpha
        self._pending: list[tuple[int, int, list, list[float], int]] = []

    @staticmethod
    def prior(n_sources: int) -> np.ndarray:
        """Trust each drafter's own estimate until evidence says otherwise (ratio 1)."""
        return np.ones((2, 2, n_sources, len(ESTIMATE_BANDS) + 1))

    @staticmethod
    def band(expected: float) -> int:
        return bisect_left(ESTIMATE_BANDS, expected)

    def ratio(self, source: int, expected: float = 0.0) -> float:
        acc, exp = self.table[self.after_hit, :, source, self.band(expected)]
        return float(acc / max(exp, 1e-3))

    def choose(self, context_len: int, trees: list, expected: list[float], extra_rows: int,
               cost: CostModel) -> int:
        """Index of the tree to verify (an empty tree's value is plain decoding's)."""
        self._step(context_len)
        kept = [t if t else None for t in trees]
        depth = max((max(t.depths()) for t in kept if t is not None), default=0)
        if depth:
            self._pending.append((context_len, self.after_hit, kept, list(expected), depth))
        values = [((1.0 + self.ratio(i, expected[i]) * expected[i]) if t else 1.0)
                  / cost(1 + (len(t) if t else 0) + extra_rows) for i, t in enumerate(trees)]
        return max(range(len(trees)), key=lambda i: values[i])

    def observe(self, context) -> None:
        """Score the kept trees whose every path is now covered by committed tokens."""
        n = len(context)
        keep = []
        for start, state, trees, expected, depth in self._pending:
            if start + depth > n:
                keep.append((start, state, trees, expected, depth))
                continue
            truth = context[start:start + depth]
            for i, t in enumerate(trees):
                if t is not None:
                    obs, b = np.array([t.follow(truth), expected[i]]), self.band(expected[i])
                    self.table[state, :, i, b] += self.alpha * (obs - self.table[state, :, i, b])
                    self.shared[state, :, i, b] += self.shared_alpha * (obs - self.shared[state, :, i, b])
        self._pending = keep


# Lookahead's draft size. Before any evidence: each candidate's first token is accepted with
# chance PRIOR_FIRST, each further token (given the one before) with PRIOR_NEXT. Mildly
# optimistic; evidence replaces it within a few steps.
PRIOR_FIRST, PRIOR_NEXT = 0.3, 0.6


class DraftSizer(_AfterHit):
    """How many of the pool's candidates to verify (count) and how far (depth): the pair with
    the most tokens per unit of forward cost, (1 + expected accepted) / cost(1 + nodes), or no
    draft when none beats plain decoding.

    What each (count, depth) would have had accepted is learnt counterfactually, so trying one
    size teaches all of them: a step's whole candidate list (all of it, N-1 tokens each) is kept
    until the N-1 tokens after its root are committed; then every candidate's match length is
    known and the accepted draft tokens of (count, depth) = min(depth, best match among the first
    `count`, or among all when there were fewer), exactly what verification would have accepted
    (greedy, and sample-and-match too: a node is accepted iff the step's draw, the committed
    token, equals it). `table` is the
    request's running mean of those, kept apart for steps after a hit and after a miss (copying
    comes in stretches: right after a hit, the next guess is far likelier to be right); it
    starts from the drafter-wide one (`shared`), which learns from every request, more slowly."""

    def __init__(self, max_count: int, max_depth: int, shared: np.ndarray | None = None,
                 alpha: float = 0.15, shared_alpha: float = 0.02):
        self.max_count, self.max_depth = max_count, max_depth
        if shared is None:
            shared = self.prior(max_count, max_depth)
        self.shared = shared
        self.table = shared.copy()
        self.alpha, self.shared_alpha = alpha, shared_alpha
        self._pending: list[tuple[int, int, list[tuple[int, ...]]]] = []

    @staticmethod
    def prior(max_count: int, max_depth: int) -> np.ndarray:
        """[after a miss / after a hit, count, depth] expected accepted draft tokens."""
        first = 1.0 - (1.0 - PRIOR_FIRST) ** np.arange(1, max_count + 1)       # any of c candidates
        per_depth = np.cumsum(PRIOR_NEXT ** np.arange(max_depth))               # 1, 1.6, 1.96, ...
        return np.stack([first[:, None] * per_depth[None, :]] * 2)

    def choose(self, candidates: Sequence[tuple[int, ...]], cost: CostModel, max_nodes: int) -> tuple[int, int]:
        """(count, depth) for this step's candidates (most recent first); (0, 0) = no draft."""
        best, best_value = (0, 0), 1.0 / cost(1)
        table = self.table[self.after_hit]
        prefixes: list[set[tuple[int, ...]]] = [set() for _ in range(self.max_depth)]
        for c, cand in enumerate(candidates[:self.max_count], start=1):
            nodes = 0
            for d in range(1, min(len(cand), self.max_depth) + 1):
                prefixes[d - 1].add(cand[:d])
                nodes += len(prefixes[d - 1])
                if nodes > max_nodes:
                    break
                value = (1.0 + table[c - 1, d - 1]) / cost(1 + nodes)
                if value > best_value:
                    best, best_value = (c, d), value
        return best

    def record(self, context_len: int, candidates: Sequence[tuple[int, ...]]) -> None:
        """This step's candidates, to be scored once the tokens after the root are known."""
        self._step(context_len)
        if candidates:
            self._pending.append((context_len, self.after_hit, list(candidates[:self.max_count])))

    def observe(self, context: Sequence[int]) -> None:
        """Score every kept candidate list whose next N-1 tokens are now in `context`."""
        n, D = len(context), self.max_depth
        while self._pending and self._pending[0][0] + D <= n:
            start, state, cands = self._pending.pop(0)
            truth = tuple(context[start:start + D])
            best, rows = 0, []
            for cand in cands:
                m = 0
                while m < D and m < len(cand) and cand[m] == truth[m]:
                    m += 1
                best = max(best, m)
                rows.append(best)
            # "up to c candidates": with fewer available, a larger count drafts all there are
            rows += [best] * (self.max_count - len(rows))
            accepted = np.minimum(np.arange(1, D + 1)[None, :], np.array(rows)[:, None])
            self.table[state] += self.alpha * (accepted - self.table[state])
            self.shared[state] += self.shared_alpha * (accepted - self.shared[state])

    def expected(self, count: int, depth: int) -> float:
        """Expected accepted draft tokens of (count, depth) in the current state."""
        return float(self.table[self.after_hit, count - 1, depth - 1])
