"""What each drafter would give at another model's cost curve: tools/replay.py's model-free replay
of recorded greedy outputs, per drafter and task set, priced by a measured t(k)/t(1) and one-row
step time (benchmarks/bandwidth_model.py: a synthetic 1.5B / 3B file's curve).

The records are the bundled model's greedy outputs of the bench's task sets (`record_bench`):
the acceptance is SmolLM2-135M's, the prices the measured model's. A real 1.5B model writes other
text, so these are estimates of the regime, not of that model.

Lookahead's Jacobi window guesses from the model's own argmax, which a replay does not have: the
window's rows are priced here (replay() prices the draft tree only) and harvest nothing, so a
drafter that runs the window pays for it and learns to stop (its window arm). Lookahead and
hybrid replay as their n-gram pools of the prompt and outputs: a lower bound for lookahead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..decoding.policy.cost import CostModel
from ..decoding.contract.proposer import DEFAULT_CONTEXT, Proposal, StepContext
from ..tools.records import Record, read_records, record_bench, write_records
from ..tools.replay import ReplayReport, replay
from .paraspec_systems import PARASPEC_SYSTEMS

# the drafters the README's table names: memory_decoding as its best bench system (dynamic tree)
DRAFTERS: dict[str, dict] = {
    "memory_decoding": PARASPEC_SYSTEMS["md-tree-dyn"],
    "hybrid": PARASPEC_SYSTEMS["hybrid"],
    "lookahead": PARASPEC_SYSTEMS["la"],
}
TASK_SETS = ("humaneval", "grounded", "chat", "repeated")
SMOLLM2_EOS = (0, 2)  # the bundled model's stop tokens (replay's CLI default)


class PricedWindow:
    """A drafter as replay() drives it, which keeps the price of each proposal's lookahead
    window (the rows past the draft tree) per request, for charge() to add to the report."""

    def __init__(self, inner):
        self.inner = inner
        self.name, self.trie = getattr(inner, "name", "?"), getattr(inner, "trie", None)
        self._open: dict[str, float] = {}
        self.window_cost: list[float] = []  # per finished request, in order
        self.window_rows = 0

    def begin(
        self,
        request_id: str,
        prompt: Sequence[int],
        seed: int | None = None,
        ctx: StepContext = DEFAULT_CONTEXT,
        identity: bytes | None = b"",
    ) -> None:
        self._open[request_id] = 0.0
        self.inner.begin(request_id, prompt, seed, ctx, identity)

    def propose(
        self,
        request_id: str,
        context: Sequence[int],
        max_nodes: int,
        ctx: StepContext = DEFAULT_CONTEXT,
    ) -> Proposal:
        p = self.inner.propose(request_id, context, max_nodes, ctx)
        if p.lookahead is not None and p.lookahead.tokens:
            rows = 1 + len(p.draft)
            self._open[request_id] += ctx.cost(rows + len(p.lookahead.tokens)) - ctx.cost(rows)
            self.window_rows += len(p.lookahead.tokens)
        return p

    def observe(
        self,
        request_id: str,
        committed: Sequence[int],
        lookahead_argmax: Sequence[int] | None = None,
    ) -> None:
        self.inner.observe(request_id, committed, lookahead_argmax)

    def end(self, request_id: str) -> None:
        self.window_cost.append(self._open.pop(request_id, 0.0))
        self.inner.end(request_id)

    def charge(self, rep: ReplayReport) -> ReplayReport:
        """rep with the windows' cost added (replay() calls end() once per request it reports)."""
        assert len(self.window_cost) == len(rep.per_request)
        rep.cost += sum(self.window_cost)
        rep.per_request = [(n, c + w, d) for (n, c, d), w in zip(rep.per_request, self.window_cost)]
        return rep


def replay_priced(
    plugin: dict,
    records: Sequence[Record],
    cost: CostModel,
    eos: Sequence[int] = SMOLLM2_EOS,
    max_nodes: int = 64,
) -> tuple[ReplayReport, int]:
    """One new drafter for `plugin` over the records (one group), windows priced: (report, window rows)."""
    from ..config import parse_plugin_params
    from ..decoding.drafters.registry import DrafterRegistry

    drafter = PricedWindow(DrafterRegistry(eos).private(parse_plugin_params(plugin)))
    rep = replay(drafter, records, max_nodes, cost)
    return drafter.charge(rep), drafter.window_rows


def replayed_speedups(
    records: Sequence[Record],
    curve: dict[int, float],
    t1_s: float,
    drafters: dict[str, dict] | None = None,
) -> dict[str, dict[str, dict]]:
    """{drafter: {task set: summary}}: replay()'s summary (tokens_per_step, modelled_speedup over
    all tokens, median_request_speedup as the bench reports per set), at the curve and a one-row
    step of t1_s seconds (the drafters' Python time is weighed against it)."""
    cost = CostModel(curve)
    out: dict[str, dict[str, dict]] = {}
    for name, plugin in (drafters or DRAFTERS).items():
        out[name] = {}
        for group in dict.fromkeys(r.group for r in records):
            rep, window_rows = replay_priced(plugin, [r for r in records if r.group == group], cost)
            out[name][group] = {**rep.summary(t1_s), "window_rows": window_rows}
    return out


def load_or_record(
    path: str | Path, task_sets: Sequence[str] = TASK_SETS, n: int = 10
) -> list[Record]:
    """The records at path; recorded first with the bundled model (greedy, minutes) if missing."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        write_records(tmp, record_bench(list(task_sets), n))
        tmp.replace(path)
    return read_records(path)
