"""CurveRefresh: the start-up cost curve kept true by the engine's own steps, compared at equal context.

The start-up probe is a few seconds of one moment: another process on the other core, or a VM
in another regime, and it reads rows dearer or cheaper than the run meets, for the process's
life (one such probe switched parallel decoding off for a whole run). A step's time grows with
its cache as well as its rows, and multi-row steps gather on long contexts (copies), so times
pooled by row count price rows wrong (docs/design-notes.md, the first correction tried). Here
every batch-1 k-row step of a sequence is paired with one-row steps of the *same* sequence at
a cache length at most NEAR tokens away (before it, or the first after it): their ratio is one
sample of t(k)/t(1) at that context. Per band of k the newest WINDOW samples are kept (bounded
memory; a regime that changes is followed), their median corrects the probe, shrunk toward it
by PRIOR_SAMPLES pseudo-samples, and the result is made plausible again (cost.plausible_curve).

Only the size of drafts follows the curve, never a token: exactness does not depend on it.
"""
from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .cost import plausible_curve

NEAR = 32             # cache lengths this close count as equal
WINDOW = 64           # samples kept per band of k (the newest)
PRIOR_SAMPLES = 8     # the probe weighs as this many samples in each band
POOLED_PRIOR = 24     # ... and in a band without samples, against all bands' samples pooled
REFRESH = 8           # new samples between two refreshed curves
ONE_ROW_KEPT = 4      # one-row steps per sequence that a k-row step is compared with (their median)
PENDING = 8           # k-row steps per sequence waiting for a one-row step after them
SHOWN = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)   # row counts info() shows (/metrics, paraspec info)


@dataclass
class _Seq:
    one: deque = field(default_factory=lambda: deque(maxlen=ONE_ROW_KEPT))     # (cache length, s)
    pending: deque = field(default_factory=lambda: deque(maxlen=PENDING))      # (cache length, rows, s)
    last_wide: bool = False


class CurveRefresh:
    """Pairs a sequence's k-row and one-row steps at equal context; every REFRESH samples a
    refreshed curve. `sizes`: the probe's measured row counts (the bands); `multiple`: the
    forward's row padding; pinned: the curve was given, not measured here (kept as it is)."""

    def __init__(self, probe: dict[int, float], sizes: tuple[int, ...], multiple: int = 1,
                 pinned: bool = False):
        self.probe = dict(probe)
        self.sizes = tuple(sorted(s for s in sizes if s > max(multiple, 1)))
        self.multiple = multiple
        self.pinned = pinned
        self.curve = dict(probe)
        self.probed_at = time.time()
        self.refreshed_at: float | None = None
        self.samples = 0             # paired samples taken, all told
        self.refreshes = 0
        self._bands: list[deque] = [deque(maxlen=WINDOW) for _ in self.sizes]   # log(ratio / probe(k))
        self._seqs: dict[object, _Seq] = {}
        self._fresh = 0

    def step(self, key: object, rows: int, cache_length: int, seconds: float) -> dict[int, float] | None:
        """One batch-1 forward of sequence `key`: `rows` query rows over a cache of
        `cache_length` tokens took `seconds`. A refreshed curve every REFRESH samples, else None."""
        if self.pinned or seconds <= 0 or not self.sizes:
            return None
        st = self._seqs.setdefault(key, _Seq())
        # rows up to the forward's padding run as one row does: the unit
        wide, st.last_wide = st.last_wide, rows > max(self.multiple, 1)
        if not st.last_wide:
            if wide:
                return None          # a step right after a wide one runs slower (its caches)
            st.one.append((cache_length, seconds))
            while st.pending:        # k-row steps that had no one-row step before them
                length, k, s = st.pending.popleft()
                if cache_length - length <= NEAR:
                    self._sample(k, s / seconds)
            return self._maybe_refresh()
        if rows > self.sizes[-1]:
            return None              # past the bands
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
        pooled_fix = float(np.median(pooled)) * len(pooled) / (len(pooled) + POOLED_PRIOR) if pooled else 0.0
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
        return {"t_k_over_t_1": {k: round(v, 3) for k, v in self.curve.items() if k in SHOWN},
                "probe": {k: round(v, 3) for k, v in self.probe.items() if k in SHOWN},
                "age_s": round(now - (self.refreshed_at or self.probed_at), 3),
                "probe_age_s": round(now - self.probed_at, 3),
                "samples": self.samples, "refreshes": self.refreshes, "pinned": self.pinned}
