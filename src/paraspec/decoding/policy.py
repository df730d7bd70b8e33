"""Cost-aware choice between drafting configurations, from measured acceptance.

Verifying more query rows is nearly free on a memory-bound machine and not free at all on a
compute-bound one (this CPU: t(16)/t(1) ~ 1.2, t(32)/t(1) ~ 1.7). Whether a lookahead window or
a second drafter pays therefore depends on the machine and on the text: copyable stretches
reward drafts, novel ones do not. `ArmSelector` runs each configuration ("arm") for short
epochs, scores it by tokens emitted per unit of forward cost, keeps using the best and retries
the others now and then. Epochs, not single steps, because a lookahead window's benefit is
delayed: the n-grams it harvests in one step are accepted a few steps later.
"""
from __future__ import annotations

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

    def _eval(self, k: int) -> float:
        if k <= self._ks[-1]:
            return float(np.interp(max(k, 1), self._ks, self._vals))
        return float(self._vals[-1] + self._slope * (k - self._ks[-1]))

    def __call__(self, rows: int) -> float:
        return self._table[rows] if rows < len(self._table) else self._eval(rows)


@dataclass
class _Arm:
    value: float = 0.0        # tokens per unit cost, smoothed over epochs
    epochs: int = 0
    last_epoch: int = -1
    retry_after: int = 0      # epochs before a losing arm is tried again (doubles while it loses)


@dataclass
class ArmSelector:
    """Per-request epoch-greedy choice among `n_arms` drafting configurations.

    Each epoch of `epoch_steps` steps runs one arm; its score is tokens / cost summed over the
    epoch. Untried arms go first, in index order (put the cheap, safe configuration at 0: short
    requests may never leave their first epoch); after that the best arm runs, and a losing arm
    is retried after `retry_after` epochs, then after twice as many each time it loses again."""

    n_arms: int
    epoch_steps: int = 6
    retry_after: int = 8
    alpha: float = 0.5
    arms: list[_Arm] = field(default_factory=list)
    current: int = 0
    epoch: int = 0
    steps: int = 0
    tokens: float = 0.0
    cost: float = 0.0

    def __post_init__(self) -> None:
        self.arms = [_Arm() for _ in range(self.n_arms)]

    def choose(self) -> int:
        return self.current

    def update(self, tokens: int, cost: float) -> None:
        """Record one step of the current arm: tokens emitted and its forward cost."""
        self.tokens += tokens
        self.cost += cost
        self.steps += 1
        if self.steps >= self.epoch_steps:
            self._end_epoch()

    def _end_epoch(self) -> None:
        arm = self.arms[self.current]
        score = self.tokens / max(self.cost, 1e-9)
        arm.value = score if arm.epochs == 0 else self.alpha * score + (1 - self.alpha) * arm.value
        arm.epochs += 1
        arm.last_epoch = self.epoch
        self.epoch += 1
        self.steps, self.tokens, self.cost = 0, 0.0, 0.0
        best = max(range(self.n_arms), key=lambda i: self.arms[i].value if self.arms[i].epochs else -1.0)
        for i, a in enumerate(self.arms):  # losers wait longer each time they lose again
            if i == best:
                a.retry_after = self.retry_after
            elif i == self.current:
                a.retry_after = min(max(a.retry_after * 2, self.retry_after), 64 * self.retry_after)
        untried = [i for i, a in enumerate(self.arms) if a.epochs == 0]
        stale = [i for i, a in enumerate(self.arms) if i != best and self.epoch - a.last_epoch > a.retry_after]
        self.current = untried[0] if untried else stale[0] if stale else best
