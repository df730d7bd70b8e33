"""ForwardCost: the engine's one cost curve, t(k)/t(1), from the probe to the steps that keep it true.

    first use -> ModelRunner.forward_cost (the probe, made plausible; or PARASPEC_FORWARD_COST)
              -> every batch-1 decode step's time -> CurveRefresh (pairs at equal context)
              -> a refreshed CostModel every few samples, which the next StepContext carries

Only the size of drafts follows the curve, never a token. A curve pinned by hand (pin(), or the
engine's `_cost` set as tests do) or by PARASPEC_FORWARD_COST is kept as it is.
"""
from __future__ import annotations

from .decoding.policy.cost import CostModel
from .decoding.policy.cost_refresh import SHOWN, CurveRefresh
from .runner import ModelRunner


class ForwardCost:
    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.model: CostModel | None = None          # the curve drafts are priced by now
        self._refresh: CurveRefresh | None = None
        self._refreshed: CostModel | None = None     # the curve the refresh last gave (or the probe's)

    def get(self) -> CostModel:
        """The curve, probed on the first use (the runner times this machine)."""
        if self.model is None:
            curve = self.runner.forward_cost()
            probe = self.runner.cost_probe
            self._refresh = CurveRefresh(curve, probe.sizes if probe else tuple(sorted(curve)),
                                         probe.multiple if probe else 1, probe.pinned if probe else False)
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
        info = self._refresh.info() if self._refresh is not None else {"samples": 0, "refreshes": 0, "age_s": 0.0}
        if cost is not self._refreshed:      # pinned by hand: the drafts see that one
            info["t_k_over_t_1"] = {k: round(cost(k), 3) for k in SHOWN}
            info["pinned"] = True
        probe = self.runner.cost_probe
        info["implausible_probe_sizes"] = list(probe.replaced) if probe else []
        return info
