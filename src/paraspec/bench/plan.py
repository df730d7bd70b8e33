"""What a `paraspec bench` run does, from its flags (Plan), and what it collects (Run, which becomes
results.json)."""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..cli_flags import add_model_args
from ..errors import ConfigError
from .base import GREEDY, SAMPLED, Measurement, SystemInfo
from .systems import ALL_SYSTEMS, is_known
from .tasks import TASK_SETS

QUICK_SYSTEMS = ("ar", "md-tree", "la")
QUICK_MAX_NEW_TOKENS = 32
QUICK_BUDGET_S = 40.0       # --quick starts no new task after this (model load included): CI's 60 s


def add_bench_flags(p: argparse.ArgumentParser) -> None:
    """Every flag of `paraspec bench` (and of `python -m paraspec.bench.run`); Plan.from_args reads them."""
    p.add_argument("--quick", action="store_true", help="smoke run, under a minute")
    p.add_argument("--out", default="bench-out", help="folder for the JSON, Markdown and PNG results")
    p.add_argument("--tasks", default=None, help="comma-separated task sets")
    p.add_argument("--systems", default=None, help="comma-separated systems")
    p.add_argument("--n", type=int, default=None, help="tasks per set")
    p.add_argument("--max-new-tokens", type=int, default=None)
    add_model_args(p)
    p.add_argument("--repeats", type=int, default=None, help="runs per task and system; medians (default 3, quick 1)")
    p.add_argument("--modes", default=None, help="greedy,sampled (default both; quick: greedy)")
    p.add_argument("--sweep", action="store_true", help="also sweep decoding_length and lookahead (N, W, G)")
    p.add_argument("--serving", action="store_true", help="also speedup vs batch size through `paraspec serve`")
    p.add_argument("--no-ttft-probe", action="store_true", help="skip the 2k-token TTFT probe")
    p.add_argument("--memory", default=None, metavar="TRIE",
                   help="pre-fill every memory system's trie from this file (LLM.save_memory) at each task set")


@dataclass
class Plan:
    out: Path
    quick: bool
    task_sets: list[str]
    systems: list[str]
    n: int | None
    max_new_tokens: int | None
    repeats: int
    modes: list[str]
    sweep: bool
    serving: bool
    ttft_probe: bool
    model: str
    dtype: str
    quantization: str | None
    threads: int | None
    budget_s: float | None
    memory_file: str | None = None
    seed: int = 0
    kv_cache_dtype: str = "fp32"
    activation_passes: int | str = "auto"

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "Plan":
        quick = bool(getattr(a, "quick", False))
        get = lambda name, default=None: getattr(a, name, default)  # noqa: E731  (tests pass partial Namespaces)
        split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
        sets = split(get("tasks")) or list(TASK_SETS)
        if bad := [s for s in sets if s not in TASK_SETS]:
            raise ConfigError(f"unknown task set {bad[0]!r}; choose from {', '.join(TASK_SETS)}")
        systems = split(get("systems")) or list(QUICK_SYSTEMS if quick else ALL_SYSTEMS)
        if bad := [s for s in systems if not is_known(s)]:
            raise ConfigError(f"unknown bench system {bad[0]!r}; choose from {', '.join(ALL_SYSTEMS)}, "
                              "md-tree-L<n>, md-chain-L<n> or la-N<n>W<w>G<g>")
        if "ar" in systems:
            systems.remove("ar")
        systems.insert(0, "ar")     # the baseline, and it runs first: peers copy its token counts
        modes = split(get("modes")) or ([GREEDY] if quick else [GREEDY, SAMPLED])
        if any(m not in (GREEDY, SAMPLED) for m in modes):
            raise ConfigError(f"--modes takes greedy and/or sampled (comma-separated), got {','.join(modes)}")
        repeats = get("repeats") or (1 if quick else 3)
        return cls(out=Path(get("out") or "bench-out"), quick=quick, task_sets=sets, systems=systems, n=get("n"),
                   max_new_tokens=get("max_new_tokens") or (QUICK_MAX_NEW_TOKENS if quick else None),
                   repeats=max(1, repeats), modes=modes, sweep=bool(get("sweep")), serving=bool(get("serving")),
                   ttft_probe=not quick and not get("no_ttft_probe"), model=get("model") or "default",
                   dtype=get("dtype") or "auto", quantization=get("quantization") or "auto", threads=get("threads"),
                   budget_s=QUICK_BUDGET_S if quick else None, memory_file=get("memory"),
                   kv_cache_dtype=get("kv_cache_dtype") or "fp32", activation_passes=get("activation_passes") or "auto")


@dataclass
class Run:
    """Everything one bench run collects; becomes results.json."""
    plan: Plan
    started: float = field(default_factory=time.perf_counter)
    systems: dict[str, SystemInfo] = field(default_factory=dict)
    tasks: list[dict] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    serving: dict | None = None
    forward_cost: dict | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def over_budget(self) -> bool:
        return self.plan.budget_s is not None and self.elapsed() > self.plan.budget_s
