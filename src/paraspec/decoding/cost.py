"""Forward cost: how much a query of k rows costs relative to one row, t(k)/t(1).

The engine measures the curve once on its machine (ModelRunner.forward_cost) and hands it to
every drafter in each step's StepContext; this is the only cost table. Verifying more rows is
nearly free where decoding is memory-bound and not free where it is compute-bound, so every
decision to verify a row is priced against it.
"""
from __future__ import annotations

import numpy as np

# t(k)/t(1) measured for SmolLM2-135M bf16 on the 2-core CPU (research/cpu-measurements.md,
# made monotone); engines pass their own curve through set_forward_cost().
DEFAULT_FORWARD_COST = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.17, 32: 1.71, 64: 2.82}


def monotone(values: list[float]) -> np.ndarray:
    """The non-decreasing sequence nearest to `values` in least squares (pool adjacent violators).
    A timing that noise pushed up is averaged with its neighbours instead of lifting every size
    after it, as a running maximum would: on a busy machine one slow round at 8 rows would
    otherwise price 8 to 32 rows alike."""
    blocks: list[list[float]] = []          # [mean, count] of pooled runs
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return np.concatenate([np.full(int(n), m) for m, n in blocks]) if blocks else np.zeros(0)


class CostModel:
    """Forward cost of a query of k rows relative to one row, interpolated (and extrapolated
    linearly past the last measured size)."""

    def __init__(self, curve: dict[int, float] | None = None):
        curve = dict(curve or DEFAULT_FORWARD_COST)
        ks = sorted(curve)
        vals = monotone([curve[k] for k in ks])
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
# optimistic (docs/design-notes.md), so that where its rows cost less than that it is tried at
# once, and where they cost more (a 2-core CPU: 1.5-1.8x a step) it
# waits, as a loser would, instead of costing an engine's first request its exploration.
WINDOW_PRIOR_GAIN = 0.3


def window_prior(cost: CostModel, window_rows: int, base_rows: int = 4) -> float:
    """A window step's tokens per unit cost relative to the same step without it, before
    evidence: (1 + WINDOW_PRIOR_GAIN) over what its rows add to a small step."""
    return (1.0 + WINDOW_PRIOR_GAIN) * cost(base_rows) / cost(base_rows + window_rows)
