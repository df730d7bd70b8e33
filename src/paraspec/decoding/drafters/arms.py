"""Which drafting configuration ("arm", e.g. with or without lookahead's Jacobi window) pays on
this machine and text, learnt from tokens per unit of forward cost.

`ArmSelector` runs each arm for short epochs, scores it by tokens emitted per unit of forward
cost, keeps using the best and retries the others now and then; what one request learns
(`ArmStats`, owned by the engine's registry per configuration) is where the next one starts.
Epochs, not single steps, because a window's benefit is delayed: the n-grams it harvests in one
step are accepted a few steps later.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ArmStats:
    """What all requests of one drafter have learned about its arms: each arm's value (tokens
    per unit of forward cost, smoothed over every request's epochs) and when a losing arm is due
    for another try. Shared by the requests' selectors, so a new request starts on the arm that
    has been winning and exploration is paced over all requests' epochs: whether a lookahead
    window pays is mostly a property of the machine's cost curve, and short requests should not
    each pay to learn it again."""

    n_arms: int
    retry_after: int = 8  # epochs (of any request) before a losing arm is tried again ...
    max_wait: int = 256  # ... doubling while it keeps losing, up to this many
    alpha: float = 0.3
    value: list[float] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    last_epoch: list[int] = field(default_factory=list)
    wait: list[int] = field(default_factory=list)
    epoch: int = 0
    supposed: list[bool] = field(default_factory=list)  # value[i] is a prior, not evidence

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
        stale = [
            i
            for i in range(self.n_arms)
            if i != best and self.epoch - self.last_epoch[i] > self.wait[i]
        ]
        return stale[0] if stale else None

    def claim(self, arm: int) -> None:
        self.last_epoch[arm] = self.epoch

    def record(self, arm: int, score: float) -> None:
        """One finished epoch of `arm` (any request) that scored `score` tokens per unit cost."""
        if self.supposed[arm]:  # a prior, not evidence: the first real score replaces it
            self.supposed[arm] = False
            self.epochs[arm] = 0
        self.value[arm] = (
            score
            if not self.epochs[arm]
            else self.alpha * score + (1 - self.alpha) * self.value[arm]
        )
        self.epochs[arm] += 1
        self.last_epoch[arm] = self.epoch
        self.epoch += 1
        best = self.best()
        if arm == best:
            self.wait[arm] = self.retry_after
        else:  # lost again: wait twice as long before the next try, 4x if it lost by far
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
            self.own[self.current] = (
                score if old is None else self.alpha * score + (1 - self.alpha) * old
            )
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
