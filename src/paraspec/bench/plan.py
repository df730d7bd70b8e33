"""What a `paraspec bench` run does, from its flags (Plan), and what it collects (Run, which becomes
results.json)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..cli_flags import add_model_args
from ..engine_args import EngineArgs
from ..errors import ConfigError
from .base import GREEDY, SAMPLED, Measurement, SystemInfo
from .paraspec_systems import WARM_SUFFIX, keeps_memory, plugin_of, warm_base
from .systems import ALL_SYSTEMS, is_known
from .tasks import ALL_TASK_SETS, TASK_SETS

QUICK_SYSTEMS = ("ar", "md-tree", "la")
QUICK_MAX_NEW_TOKENS = 32
QUICK_BUDGET_S = 40.0  # --quick starts no new task after this (model load included): CI's 60 s


def add_bench_flags(p: argparse.ArgumentParser) -> None:
    """Every flag of `paraspec bench` (and of `python -m paraspec.bench.run`); Plan.from_args reads them."""
    p.add_argument("--quick", action="store_true", help="smoke run, under a minute")
    p.add_argument(
        "--out", default="bench-out", help="folder for the JSON, Markdown and PNG results"
    )
    p.add_argument(
        "--tasks",
        default=None,
        help=f"comma-separated task sets: {', '.join(ALL_TASK_SETS)} "
        f"(default: {','.join(TASK_SETS)}; mtbench, sharegpt need `paraspec fetch mtbench sharegpt`)",
    )
    p.add_argument(
        "--systems",
        default=None,
        help="comma-separated systems; a memory system with "
        f"'{WARM_SUFFIX}' (hybrid{WARM_SUFFIX}) starts from the warm memory, without it cold",
    )
    p.add_argument("--n", type=int, default=None, help="tasks per set")
    p.add_argument("--max-new-tokens", type=int, default=None)
    add_model_args(p)
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs per task and system; medians (default 3, quick 1)",
    )
    p.add_argument("--modes", default=None, help="greedy,sampled (default both; quick: greedy)")
    p.add_argument(
        "--sweep", action="store_true", help="also sweep decoding_length and lookahead (N, W, G)"
    )
    p.add_argument(
        "--serving", action="store_true", help="also speedup vs batch size through `paraspec serve`"
    )
    p.add_argument("--no-ttft-probe", action="store_true", help="skip the 2k-token TTFT probe")
    p.add_argument(
        "--memory",
        default=None,
        metavar="TRIE",
        help="pre-fill every memory system's trie from this file (LLM.save_memory) at each task set",
    )
    p.add_argument(
        "--warm-memory",
        default=None,
        metavar="FILE",
        help="the memory the '+warm' systems start from (default: the largest built for --model "
        "under ~/.cache/paraspec/warm); with --build-warm-memory, where to save it",
    )
    p.add_argument(
        "--build-warm-memory",
        type=int,
        default=None,
        metavar="N",
        help="build a warm memory from the model's greedy answers to N ShareGPT prompts of the warm "
        "split (never benchmarked), save it and exit",
    )


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
    engine: EngineArgs  # the model and its numerics (the model flags, checked)
    budget_s: float | None
    memory_file: str | None = None
    warm_memory_file: str | None = None  # what the "+warm" systems start from
    build_warm_memory: int | None = (
        None  # build a warm memory of this many answers instead of a run
    )
    seed: int = 0

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "Plan":
        quick = bool(getattr(a, "quick", False))
        get = lambda name, default=None: getattr(a, name, default)  # noqa: E731  (tests pass partial Namespaces)
        split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
        sets = split(get("tasks")) or list(TASK_SETS)
        if bad := [s for s in sets if s not in ALL_TASK_SETS]:
            raise ConfigError(
                f"unknown task set {bad[0]!r}; choose from {', '.join(ALL_TASK_SETS)}"
            )
        systems = split(get("systems")) or list(QUICK_SYSTEMS if quick else ALL_SYSTEMS)
        if bad := [s for s in systems if not is_known(warm_base(s) or s)]:
            raise ConfigError(
                f"unknown bench system {bad[0]!r}; choose from {', '.join(ALL_SYSTEMS)}, "
                "md-tree-L<n>, md-chain-L<n> or la-N<n>W<w>G<g> (memory systems also with "
                f"{WARM_SUFFIX})"
            )
        if bad := [
            s for s in systems if warm_base(s) and not keeps_memory(plugin_of(warm_base(s)))
        ]:
            raise ConfigError(
                f"{bad[0]}: {warm_base(bad[0])} keeps no memory to warm; '{WARM_SUFFIX}' goes on "
                "memory_decoding and hybrid systems (md-*, hybrid)",
                param="systems",
            )
        engine = EngineArgs.from_cli(a, groups=("model",)).check()
        model = engine.model
        warm = _warm_file(
            get("warm_memory"), model, any(map(warm_base, systems)), get("build_warm_memory")
        )
        if "ar" in systems:
            systems.remove("ar")
        systems.insert(0, "ar")  # the baseline, and it runs first: peers copy its token counts
        modes = split(get("modes")) or ([GREEDY] if quick else [GREEDY, SAMPLED])
        if any(m not in (GREEDY, SAMPLED) for m in modes):
            raise ConfigError(
                f"--modes takes greedy and/or sampled (comma-separated), got {','.join(modes)}"
            )
        repeats = get("repeats") or (1 if quick else 3)
        return cls(
            out=Path(get("out") or "bench-out"),
            quick=quick,
            task_sets=sets,
            systems=systems,
            n=get("n"),
            max_new_tokens=get("max_new_tokens") or (QUICK_MAX_NEW_TOKENS if quick else None),
            repeats=max(1, repeats),
            modes=modes,
            sweep=bool(get("sweep")),
            serving=bool(get("serving")),
            ttft_probe=not quick and not get("no_ttft_probe"),
            engine=engine,
            budget_s=QUICK_BUDGET_S if quick else None,
            memory_file=get("memory"),
            warm_memory_file=warm,
            build_warm_memory=get("build_warm_memory"),
        )


def _warm_file(given: str | None, model: str, wanted: bool, building: int | None) -> str | None:
    """The warm memory the "+warm" systems start from; a one-line error where there is none."""
    from .warm_memory import find_default

    if building is not None or not wanted:
        return given
    if given:
        if not Path(given).is_file():
            raise ConfigError(
                f"--warm-memory {given} does not exist; build it with `paraspec bench "
                f"--build-warm-memory 64 --model {model} --warm-memory {given}`",
                param="warm_memory",
            )
        return given
    if (found := find_default(model)) is None:
        raise ConfigError(
            f"the '{WARM_SUFFIX}' systems need a warm memory and none was built for {model}; "
            f"run `paraspec bench --build-warm-memory 64 --model {model}` "
            "(or pass --warm-memory FILE)",
            param="warm_memory",
        )
    return str(found)


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
    warm_memory: dict | None = None  # what the warm file's <file>.json says of it

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def over_budget(self) -> bool:
        return self.plan.budget_s is not None and self.elapsed() > self.plan.budget_s
