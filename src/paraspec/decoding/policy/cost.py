"""Forward cost: how much a query of k rows costs relative to one row, t(k)/t(1).

The engine probes the curve at start-up (ModelRunner.forward_cost), gives it a physically
plausible shape here (plausible_curve), refreshes it from its own steps (cost_refresh.py) and
hands it to every drafter in each step's StepContext; this is the only cost table. Verifying
more rows is nearly free where decoding is memory-bound and not free where it is compute-bound,
so every decision to verify a row is priced against it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A curve of the bundled model's shape (bf16, rows padded to 4: flat while memory-bound, then
# linear), for a CostModel built without one; an engine prices drafts by the curve it probes and
# refreshes itself (ModelRunner.forward_cost, forward_cost.py).
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


# The shape of t(k)/t(1) - 1 per forward kind, as measured (docs/design-notes.md): a prior for the
# points of a probe that cannot be right. Only the shape is used: it is scaled to the probe's
# plausible points, so a CPU whose rows are dearer or cheaper than these keeps its own level.
# Unpadded (GGUF blocks): Zen 4 avx512 as the engine met it; one row is a GEMV, 2+ run row tiles.
PRIOR_UNPADDED = {1: 1.0, 2: 1.3, 3: 1.5, 4: 1.75, 6: 2.2, 8: 2.7, 12: 3.3, 16: 4.0, 24: 5.6, 32: 7.5,
                  48: 11.3, 64: 15.0}
PRIOR_PADDED = DEFAULT_FORWARD_COST      # rows padded to 4: flat while memory-bound, then linear
IMPLAUSIBLE = 2.0       # a point off the scaled prior by this factor either way
SUBADDITIVE_SLACK = 1.1  # ... or dearer than two smaller forwards that make up its rows, by this


@dataclass(frozen=True)
class ShapedCurve:
    curve: dict[int, float]          # t(k)/t(1) for k = 1 .. the largest size
    replaced: tuple[int, ...]        # sizes whose measured value was implausible (the prior's instead)


def _excess_scale(ks: list[int], vals: list[float], prior: dict[int, float]) -> float:
    """The median ratio of the points' excess cost t(k) - 1 to the prior's."""
    pk = sorted(prior)
    at = np.interp(ks, pk, [prior[j] for j in pk]).tolist()
    ratios = [(v - 1.0) / (p - 1.0) for k, v, p in zip(ks, vals, at) if k > 1 and p > 1.0]
    return float(np.median(ratios)) if ratios else 1.0


def _subadditive(table: list[float], multiple: int) -> list[float]:
    """The largest curve under `table` (t[0] = 0) with t(a + b) <= t(a) + t(b) for row counts the
    forward runs (multiples of `multiple`): one forward of a + b rows reads the weights once, two
    read them twice, so it cannot cost more than the two. Monotone stays monotone."""
    t = list(table)
    for k in range(2 * multiple, len(t), multiple):
        t[k] = min(t[k], min(t[a] + t[k - a] for a in range(multiple, k // 2 + 1, multiple)))
    return t


def plausible_curve(measured: dict[int, float], multiple: int = 1,
                    prior: dict[int, float] | None = None, check_prior: bool = True) -> ShapedCurve:
    """A probe's t(k)/t(1) at its sizes, made physically possible: t(1) = 1; no k costs less than
    one row or more than k rows; monotone; no forward dearer than two that make up its rows. A
    point far off those (a probe disturbed by other work on the machine: one such probe read
    t(8) 5.2 and t(16) 14.8 where t(4) was 2.2) takes the prior's shape, scaled to the plausible
    points, instead of its reading (check_prior=False: only the hard bounds, for a curve refreshed
    from the engine's own steps, which is evidence, not a probe). Returns every k from 1 to the largest size; with multiple > 1
    (padded rows) k costs what its padded size does."""
    prior = prior or (PRIOR_PADDED if multiple > 1 else PRIOR_UNPADDED)
    ks = sorted(k for k in measured if k >= 1)
    m = max(multiple, 1)
    # one row runs padded to m rows: the unit is what m rows cost
    one = float(np.interp(m, ks, [measured[k] for k in ks]))
    vals = [min(max(measured[k] / one, 1.0), float(max(k, m)) / m) for k in ks]
    pk = sorted(prior)
    prior_at = np.interp(ks, pk, [prior[j] for j in pk]).tolist()
    scale = _excess_scale(ks, vals, prior)
    fit = monotone(vals)
    dense = [0.0] + np.interp(np.arange(1, ks[-1] + 1), ks, fit).tolist()
    bound = _subadditive(dense, m)
    bad = []
    for i, (k, v, p) in enumerate(zip(ks, vals, prior_at)):
        if k <= m:
            continue
        off = v / (1.0 + scale * (p - 1.0))
        if (check_prior and (off > IMPLAUSIBLE or off < 1.0 / IMPLAUSIBLE)) or v > SUBADDITIVE_SLACK * bound[k]:
            bad.append(i)
    if bad:
        good = [i for i in range(len(ks)) if i not in bad]
        scale = _excess_scale([ks[i] for i in good], [vals[i] for i in good], prior)
        for i in bad:
            vals[i] = min(max(1.0 + scale * (prior_at[i] - 1.0), 1.0), float(max(ks[i], m)) / m)
    fit = monotone(vals)
    padded = -(-np.arange(1, ks[-1] + 1) // m) * m        # each k at its padded size
    dense = [0.0] + np.interp(padded, ks, fit).tolist()
    dense = _subadditive(dense, m)
    # the subadditive bound moved padded sizes only: rows in between cost their padded size's
    dense = [0.0] + [dense[min(-(-k // m) * m, ks[-1])] for k in range(1, ks[-1] + 1)]
    return ShapedCurve({k: max(dense[k], 1.0) for k in range(1, ks[-1] + 1)},
                       tuple(ks[i] for i in bad))


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
        rows = np.arange(0, 257)
        inside = rows <= self._ks[-1]      # _eval's two cases, for all rows at once
        self._table = np.where(inside, np.interp(np.maximum(rows, 1), self._ks, self._vals),
                               self._vals[-1] + self._slope * (rows - self._ks[-1])).tolist()
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
