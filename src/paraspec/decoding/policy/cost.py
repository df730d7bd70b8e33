"""The forward cost curve: how much a query of k rows costs relative to one row, t(k)/t(1).

Verifying more rows is nearly free where decoding is memory-bound and not free where it is
compute-bound, so every decision to verify a row is priced against this curve, the only cost
table. Only the size of drafts follows it, never a token: exactness does not depend on it.

    first use -> ModelRunner.forward_cost (the probe; or PARASPEC_FORWARD_COST)
              -> plausible_curve (a probe point that cannot be right replaced by the prior's shape)
              -> every batch-1 decode step's time -> CurveRefresh (pairs at equal context)
              -> a refreshed CostModel every few samples, which the next StepContext carries

- CostModel: the curve as drafters read it (cost(k), free rows on the current stair);
- plausible_curve: a probe's points given a physically plausible shape;
- CurveRefresh: the curve kept true by the engine's own steps. The start-up probe is a few
  seconds of one moment: another process on the other core, or a VM in another regime, and it
  reads rows dearer or cheaper than the run meets, for the process's life (one such probe
  switched parallel decoding off for a whole run). A step's time grows with its cache as well as
  its rows, and multi-row steps gather on long contexts (copies), so times pooled by row count
  price rows wrong (docs/design-notes.md, the first correction tried). Every batch-1 k-row step
  of a sequence is paired with one-row steps of the *same* sequence at a cache length at most
  NEAR tokens away (before it, or the first after it): their ratio is one sample of t(k)/t(1) at
  that context. Per band of k the newest WINDOW samples are kept (bounded memory; a regime that
  changes is followed), their median corrects the probe, shrunk toward it by PRIOR_SAMPLES
  pseudo-samples, and the result is made plausible again;
- ForwardCost: the engine's one curve, from the probe through the refreshes; a curve pinned by
  hand (pin(), Engine.pin_cost) or by PARASPEC_FORWARD_COST is kept as it is.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ...runner import ModelRunner

# A curve of the bundled model's shape (bf16, rows padded to 4: flat while memory-bound, then
# linear), for a CostModel built without one; an engine prices drafts by the curve it probes and
# refreshes itself (ModelRunner.forward_cost, ForwardCost below).
DEFAULT_FORWARD_COST = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.17, 32: 1.71, 64: 2.82}


def monotone(values: list[float]) -> np.ndarray:
    """The non-decreasing sequence nearest to `values` in least squares (pool adjacent violators).
    A timing that noise pushed up is averaged with its neighbours instead of lifting every size
    after it, as a running maximum would: on a busy machine one slow round at 8 rows would
    otherwise price 8 to 32 rows alike."""
    blocks: list[list[float]] = []  # [mean, count] of pooled runs
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, n2), (m1, n1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return np.concatenate([np.full(int(n), m) for m, n in blocks]) if blocks else np.zeros(0)


# The shape of t(k)/t(1) - 1 per forward kind, as measured (docs/design-notes.md): a prior for the
# points of a probe that cannot be right. Only the shape is used: it is scaled to the probe's
# plausible points, so a CPU whose rows are dearer or cheaper than these keeps its own level.
# Unpadded (GGUF blocks): one row is a GEMV, 2+ run row tiles (the CPU it was read on: the notes).
PRIOR_UNPADDED = {
    1: 1.0,
    2: 1.3,
    3: 1.5,
    4: 1.75,
    6: 2.2,
    8: 2.7,
    12: 3.3,
    16: 4.0,
    24: 5.6,
    32: 7.5,
    48: 11.3,
    64: 15.0,
}
PRIOR_PADDED = DEFAULT_FORWARD_COST  # rows padded to 4: flat while memory-bound, then linear
IMPLAUSIBLE = 2.0  # a point off the scaled prior by this factor either way
SUBADDITIVE_SLACK = 1.1  # ... or dearer than two smaller forwards that make up its rows, by this


@dataclass(frozen=True)
class ShapedCurve:
    curve: dict[int, float]  # t(k)/t(1) for k = 1 .. the largest size
    replaced: tuple[int, ...]  # sizes whose measured value was implausible (the prior's instead)


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


def plausible_curve(
    measured: dict[int, float],
    multiple: int = 1,
    prior: dict[int, float] | None = None,
    check_prior: bool = True,
) -> ShapedCurve:
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
        if (
            check_prior and (off > IMPLAUSIBLE or off < 1.0 / IMPLAUSIBLE)
        ) or v > SUBADDITIVE_SLACK * bound[k]:
            bad.append(i)
    if bad:
        good = [i for i in range(len(ks)) if i not in bad]
        scale = _excess_scale([ks[i] for i in good], [vals[i] for i in good], prior)
        for i in bad:
            vals[i] = min(max(1.0 + scale * (prior_at[i] - 1.0), 1.0), float(max(ks[i], m)) / m)
    fit = monotone(vals)
    padded = -(-np.arange(1, ks[-1] + 1) // m) * m  # each k at its padded size
    dense = [0.0] + np.interp(padded, ks, fit).tolist()
    dense = _subadditive(dense, m)
    # the subadditive bound moved padded sizes only: rows in between cost their padded size's
    dense = [0.0] + [dense[min(-(-k // m) * m, ks[-1])] for k in range(1, ks[-1] + 1)]
    return ShapedCurve(
        {k: max(dense[k], 1.0) for k in range(1, ks[-1] + 1)}, tuple(ks[i] for i in bad)
    )


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
        inside = rows <= self._ks[-1]  # _eval's two cases, for all rows at once
        self._table = np.where(
            inside,
            np.interp(np.maximum(rows, 1), self._ks, self._vals),
            self._vals[-1] + self._slope * (rows - self._ks[-1]),
        ).tolist()
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
# once, and where they cost more (a small CPU's steep curve) it waits, as a loser would,
# instead of costing an engine's first request its exploration.
WINDOW_PRIOR_GAIN = 0.3


def window_prior(cost: CostModel, window_rows: int, base_rows: int = 4) -> float:
    """A window step's tokens per unit cost relative to the same step without it, before
    evidence: (1 + WINDOW_PRIOR_GAIN) over what its rows add to a small step."""
    return (1.0 + WINDOW_PRIOR_GAIN) * cost(base_rows) / cost(base_rows + window_rows)


NEAR = 32  # cache lengths this close count as equal
WINDOW = 64  # samples kept per band of k (the newest)
PRIOR_SAMPLES = 8  # the probe weighs as this many samples in each band
POOLED_PRIOR = 24  # ... and in a band without samples, against all bands' samples pooled
REFRESH = 8  # new samples between two refreshed curves
ONE_ROW_KEPT = 4  # one-row steps per sequence that a k-row step is compared with (their median)
PENDING = 8  # k-row steps per sequence waiting for a one-row step after them
SHOWN = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)  # row counts info() shows (/metrics, paraspec info)


@dataclass
class _Seq:
    one: deque = field(default_factory=lambda: deque(maxlen=ONE_ROW_KEPT))  # (cache length, s)
    pending: deque = field(default_factory=lambda: deque(maxlen=PENDING))  # (cache length, rows, s)
    last_wide: bool = False


class CurveRefresh:
    """Pairs a sequence's k-row and one-row steps at equal context; every REFRESH samples a
    refreshed curve. `sizes`: the probe's measured row counts (the bands); `multiple`: the
    forward's row padding; pinned: the curve was given, not measured here (kept as it is)."""

    def __init__(
        self,
        probe: dict[int, float],
        sizes: tuple[int, ...],
        multiple: int = 1,
        pinned: bool = False,
    ):
        self.probe = dict(probe)
        self.sizes = tuple(sorted(s for s in sizes if s > max(multiple, 1)))
        self.multiple = multiple
        self.pinned = pinned
        self.curve = dict(probe)
        self.probed_at = time.time()
        self.refreshed_at: float | None = None
        self.samples = 0  # paired samples taken, all told
        self.refreshes = 0
        # log(ratio / probe(k))
        self._bands: list[deque] = [deque(maxlen=WINDOW) for _ in self.sizes]
        self._seqs: dict[object, _Seq] = {}
        self._fresh = 0

    def step(
        self, key: object, rows: int, cache_length: int, seconds: float
    ) -> dict[int, float] | None:
        """One batch-1 forward of sequence `key`: `rows` query rows over a cache of
        `cache_length` tokens took `seconds`. A refreshed curve every REFRESH samples, else None."""
        if self.pinned or seconds <= 0 or not self.sizes:
            return None
        st = self._seqs.setdefault(key, _Seq())
        # rows up to the forward's padding run as one row does: the unit
        wide, st.last_wide = st.last_wide, rows > max(self.multiple, 1)
        if not st.last_wide:
            if wide:
                return None  # a step right after a wide one runs slower (its caches)
            st.one.append((cache_length, seconds))
            while st.pending:  # k-row steps that had no one-row step before them
                length, k, s = st.pending.popleft()
                if cache_length - length <= NEAR:
                    self._sample(k, s / seconds)
            return self._maybe_refresh()
        if rows > self.sizes[-1]:
            return None  # past the bands
        near = [s for length, s in st.one if cache_length - length <= NEAR]
        if near:
            self._sample(rows, seconds / float(np.median(near)))
            return self._maybe_refresh()
        st.pending.append((cache_length, rows, seconds))
        return None

    def forget(self, key: object) -> None:
        self._seqs.pop(key, None)

    def _sample(self, rows: int, ratio: float) -> None:
        band = bisect_left(self.sizes, rows)
        # against the probe at these rows (between two probed sizes: its line between them)
        ks = sorted(self.probe)
        expected = self.probe.get(rows) or float(np.interp(rows, ks, [self.probe[k] for k in ks]))
        self._bands[band].append(math.log(ratio / expected))
        self.samples += 1
        self._fresh += 1

    def _maybe_refresh(self) -> dict[int, float] | None:
        if self._fresh < REFRESH:
            return None
        self._fresh = 0
        self.curve = self.refreshed()
        self.refreshed_at = time.time()
        self.refreshes += 1
        return self.curve

    def refreshed(self) -> dict[int, float]:
        """The probe at its sizes, each corrected by its band's median log ratio (shrunk toward
        the probe; a band without samples by all bands' pooled), made plausible."""
        pooled = [x for b in self._bands for x in b]
        pooled_fix = (
            float(np.median(pooled)) * len(pooled) / (len(pooled) + POOLED_PRIOR) if pooled else 0.0
        )
        # the unit stays the unit: up to the forward's row padding a step costs one (padded) row
        points = {k: self.probe.get(k, 1.0) for k in range(1, max(self.multiple, 1) + 1)}
        for size, band in zip(self.sizes, self._bands):
            n = len(band)
            fix = float(np.median(band)) * n / (n + PRIOR_SAMPLES) if n else pooled_fix
            points[size] = self.probe[size] * math.exp(fix)
        return plausible_curve(points, self.multiple, check_prior=False).curve

    def info(self) -> dict:
        """What /metrics and `paraspec info` show: the curve in use, its age, its evidence."""
        now = time.time()
        return {
            "t_k_over_t_1": {k: round(v, 3) for k, v in self.curve.items() if k in SHOWN},
            "probe": {k: round(v, 3) for k, v in self.probe.items() if k in SHOWN},
            "age_s": round(now - (self.refreshed_at or self.probed_at), 3),
            "probe_age_s": round(now - self.probed_at, 3),
            "samples": self.samples,
            "refreshes": self.refreshes,
            "pinned": self.pinned,
        }


class ForwardCost:
    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.model: CostModel | None = None  # the curve drafts are priced by now
        self._refresh: CurveRefresh | None = None
        self._refreshed: CostModel | None = None  # the curve the refresh last gave (or the probe's)

    def get(self) -> CostModel:
        """The curve, probed on the first use (the runner times this machine)."""
        if self.model is None:
            curve = self.runner.forward_cost()
            probe = self.runner.cost_probe
            self._refresh = CurveRefresh(
                curve,
                probe.sizes if probe else tuple(sorted(curve)),
                probe.multiple if probe else 1,
                probe.pinned if probe else False,
            )
            self.model = self._refreshed = CostModel(curve)
        return self.model

    def pin(self, model: CostModel | None) -> None:
        """Price drafts by `model` from now on, unrefreshed (None: probe again on the next use)."""
        self.model = model

    @property
    def refreshing(self) -> bool:
        return self._refresh is not None and self.model is self._refreshed

    def step(self, key: object, rows: int, cache_length: int, seconds: float) -> None:
        """A batch-1 decode forward of sequence `key` (a batch's rows are several sequences' at
        several cache lengths: not comparable, so not given)."""
        if self.refreshing:
            curve = self._refresh.step(key, rows, cache_length, seconds)
            if curve is not None:
                self.model = self._refreshed = CostModel(curve)

    def forget(self, key: object) -> None:
        if self._refresh is not None:
            self._refresh.forget(key)

    def info(self, measure: bool = True) -> dict | None:
        """The curve drafts are priced by, its age and the samples that refreshed it (/metrics,
        `paraspec info`). measure=False: None until the curve was probed (a scrape from another
        thread must not run the probe)."""
        if self.model is None and not measure:
            return None
        cost = self.get()
        info = (
            self._refresh.info()
            if self._refresh is not None
            else {"samples": 0, "refreshes": 0, "age_s": 0.0}
        )
        if cost is not self._refreshed:  # pinned by hand: the drafts see that one
            info["t_k_over_t_1"] = {k: round(cost(k), 3) for k in SHOWN}
            info["pinned"] = True
        probe = self.runner.cost_probe
        info["implausible_probe_sizes"] = list(probe.replaced) if probe else []
        return info
