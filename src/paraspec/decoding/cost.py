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


BANDS = (2, 4, 8, 16, 32, 64)  # row counts a correction is kept for: k rows fall in the first band >= k
NEAR = 32                   # cache lengths this close count as equal
PRIOR_SAMPLES = 4           # a band's mean leans on all bands' (a regime moves them together) and
                            # that on the start-up curve, as this many paired steps each
REFRESH = 16                # paired steps between two corrected curves


class PairedTimes:
    """The start-up curve corrected by the engine's own steps, compared at equal cache length.

    A step's time grows with its cache as well as its rows, and drafted multi-row steps gather
    on long contexts, so step times pooled by row count price rows wrong (docs/design-notes.md).
    Here a k-row step of a sequence is compared with a one-row step of the same sequence at
    most NEAR tokens earlier (one that followed a one-row step: a step right after a wide one
    runs slower); per band of k the mean log ratio to the start-up curve's t(k) scales the
    curve, shrunk toward all bands' mean ratio and that toward the start-up curve. (On a VM the
    start-up probe can read another regime than the run meets: every row count off by the same
    share, docs/design-notes.md.) Batch-1 steps only: a batch's rows are several sequences'
    at several cache lengths."""

    def __init__(self, curve: dict[int, float]):
        self.base = dict(curve)
        self._model = CostModel(curve)
        self._log = [0.0] * len(BANDS)
        self._n = [0] * len(BANDS)
        self._one: dict[object, tuple[int, float]] = {}    # key -> (cache length, seconds)
        self._wide: dict[object, bool] = {}                # key -> its last step had rows > 1
        self._fresh = 0

    def step(self, key: object, rows: int, seconds: float, cache_length: int) -> dict[int, float] | None:
        """One batch-1 forward of `key`'s `rows` rows at `cache_length`; a corrected curve every
        REFRESH paired steps, else None."""
        wide, self._wide[key] = self._wide.get(key, False), rows > 1
        if rows == 1:
            if not wide:
                self._one[key] = (cache_length, seconds)
            return None
        one = self._one.get(key)
        if one is None or cache_length - one[0] > NEAR or rows > BANDS[-1]:
            return None
        b = next(i for i, top in enumerate(BANDS) if rows <= top)
        self._log[b] += np.log(seconds / one[1] / self._model(rows))
        self._n[b] += 1
        self._fresh += 1
        if self._fresh < REFRESH:
            return None
        self._fresh = 0
        return self.curve()

    def curve(self) -> dict[int, float]:
        """The start-up curve, each k scaled by its band's shrunk mean ratio."""
        overall = sum(self._log) / (sum(self._n) + PRIOR_SAMPLES)
        scale = [np.exp((lg + PRIOR_SAMPLES * overall) / (n + PRIOR_SAMPLES)) for lg, n in zip(self._log, self._n)]
        return {k: v if k == 1 else v * float(scale[next((i for i, top in enumerate(BANDS) if k <= top), -1)])
                for k, v in self.base.items()}

    def forget(self, key: object) -> None:
        self._one.pop(key, None)
        self._wide.pop(key, None)


# Before any evidence, a Jacobi window is supposed to add this share of tokens per step:
# optimistic (docs/design-notes.md), so that where its rows cost less than that it is tried at
# once, and where they cost more (a 2-core CPU: 1.5-1.8x a step) it
# waits, as a loser would, instead of costing an engine's first request its exploration.
WINDOW_PRIOR_GAIN = 0.3


def window_prior(cost: CostModel, window_rows: int, base_rows: int = 4) -> float:
    """A window step's tokens per unit cost relative to the same step without it, before
    evidence: (1 + WINDOW_PRIOR_GAIN) over what its rows add to a small step."""
    return (1.0 + WINDOW_PRIOR_GAIN) * cost(base_rows) / cost(base_rows + window_rows)
