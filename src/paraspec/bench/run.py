"""`paraspec bench`: every system on the same prompts in one run, then results.json, report.md and plots.

    paraspec bench --quick                      # smoke run: < 60 s on 2 cores (CI)
    paraspec bench --out docs/bench/YYYY-MM-DD-<cpu> --sweep --serving   # the full suite (docs/bench/README.md)
    python -m paraspec.bench.run ...            # the same
    python -m paraspec.bench.report docs/bench/<run>/results.json   # redo report.md and plots from the JSON

Method (why each rule):
  * one model instance for all paraspec systems; systems differ only in their drafter;
  * interleaved: each task is run by every system (AR first: peers copy its token count) before the
    next task starts, and repeats go round the systems, so machine drift hits all systems alike;
    the others' order rotates with every task and repeat, so no system always runs after the same
    one (what a run leaves behind in caches and the allocator then favours none);
  * medians over repeats per task, speedups as ratios to paraspec AR on the same task;
  * memory_decoding's trie is not pre-filled (unless --memory FILE): empty when a task set begins,
    it then accumulates the set's earlier tasks (see systems.py), which `repeated` exists to show;
    "<system>+warm" starts from a warm memory instead (warm_memory.py), in the same run;
  * a task of several turns (mtbench) is run turn by turn, each system answering its own earlier
    answers (dialogue.py); every turn is run by every system (AR first) before the next turn.
--quick: 1 task per set (2 for `repeated`), ar / md-tree / la, 32 new tokens, 1 repeat, greedy; it
starts no new task after QUICK_BUDGET_S (a loaded CI machine still finishes, with a note saying so).
Suites: "main" (task sets x systems x modes), "sweep" (--sweep: decoding_length and lookahead
(N, W, G) on a few tasks), "ttft" (trie insertion cost on a 2k-token prompt, full runs), and the
serving benchmark (--serving: benchmarks/serving.py's load generator against `paraspec serve`,
serving_suite.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from ..errors import ConfigError
from .base import GREEDY, BenchTask, Measurement, RunParams, SkipSystem, System
from .dialogue import Dialogue
from .paraspec_systems import ParaspecSystem, plugin_of, warm_base
from .plan import Plan, Run, add_bench_flags
from .results import write_results
from .serving_suite import serving_suite
from .systems import SystemContext, describe_skipped, make_system
from .tasks import Task, load_task_set, quick_tasks
from .warm_memory import build_main, provenance

# repeated: a request and its repeat; mtbench: one question, both its turns
QUICK_TASKS = {"humaneval": 1, "grounded": 1, "chat": 1, "repeated": 2, "mtbench": 1, "sharegpt": 1}
FULL_TASKS_PER_SET = 8
SWEEP_DECODING_LENGTHS = (2, 4, 8, 12, 16)
SWEEP_LOOKAHEAD = tuple((n, w, g) for n in (3, 4, 5) for w in (3, 5, 7) for g in (3, 5))
SWEEP_SETS = {"grounded": 2, "humaneval": 2}
SWEEP_MAX_NEW_TOKENS = 128
TTFT_PROMPT_TOKENS = 2048


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmark paraspec against its peers")
    add_bench_flags(b)
    b.set_defaults(func=bench_main)


# --------------------------------------------------------------------------------------------- main


def bench_main(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    plan = Plan.from_args(args)
    if plan.build_warm_memory is not None:
        return build_main(plan)
    run = Run(plan)
    # a data file not fetched fails before the load
    picked = {s: _pick(s, plan) for s in plan.task_sets}
    run.warm_memory = _check_warm(plan, picked)
    from .. import LLM  # (torch is imported here, not when cli.py imports this module)

    # no prefix cache: every system runs the same prompts, and each must prefill them for its TTFT
    llm = LLM.from_engine_args(dataclasses.replace(plan.engine, prefix_cache_mb=0))
    plan.engine = dataclasses.replace(
        plan.engine,
        dtype=llm.config.dtype,  # "auto" as resolved here
        quantization=llm.config.quantization,
        activation_passes=llm.model.activation_passes,
    )
    import torch

    ctx = SystemContext(
        llm,
        plan.engine.model,
        plan.engine.dtype,
        torch.get_num_threads(),
        memory_file=plan.memory_file,
    )
    tasks = {
        s: [Dialogue.of(t, llm.tokenizer, plan.max_new_tokens) for t in ts]
        for s, ts in picked.items()
    }
    # one entry per measured turn; a later turn's prompt is each system's own (its Measurement has the length)
    run.tasks = [
        dict(
            task_set=d.first.task_set,
            task_id=d.turn_id(k),
            kind=d.kind,
            turn=k + 1 if d.turns > 1 else None,
            prompt_tokens=None if k else len(d.first.prompt_ids),
            max_new_tokens=d.first.max_new_tokens,
            source=d.first.source,
        )
        for ts in tasks.values()
        for d in ts
        for k in range(d.turns)
    ]

    systems = _prepare(plan.systems, ctx, run)
    run.forward_cost = _forward_cost(llm, systems)
    _warm_up(systems, tasks)
    _suite("main", systems, tasks, plan.modes, plan.repeats, run)
    if plan.sweep:
        names = (
            ["ar"]
            + [f"md-tree-L{n}" for n in SWEEP_DECODING_LENGTHS]
            + [f"la-N{n}W{w}G{g}" for n, w, g in SWEEP_LOOKAHEAD]
        )
        sweep_tasks = {
            s: [
                Dialogue.of(
                    t,
                    llm.tokenizer,
                    min(plan.max_new_tokens or SWEEP_MAX_NEW_TOKENS, SWEEP_MAX_NEW_TOKENS),
                )
                for t in (quick_tasks(s, 1) if plan.quick else load_task_set(s, k, seed=plan.seed))
            ]
            for s, k in SWEEP_SETS.items()
        }
        sweep_systems = [systems[0]] + _prepare(names[1:], ctx, run)
        _suite("sweep", sweep_systems, sweep_tasks, [GREEDY], plan.repeats, run)
    if plan.ttft_probe:
        _ttft_probe(systems, llm, run)
    for s in systems:
        s.close()
    if plan.serving:
        run.serving = serving_suite(plan, run)
    return write_results(run)


def _pick(task_set: str, plan: Plan) -> list[Task]:
    if plan.quick:
        return quick_tasks(task_set, plan.n or QUICK_TASKS[task_set], seed=plan.seed)
    return load_task_set(task_set, plan.n or FULL_TASKS_PER_SET, seed=plan.seed)


def _check_warm(plan: Plan, picked: dict[str, list[Task]]) -> dict | None:
    """The warm file's provenance; an error where it was built from this run's ShareGPT chats (it
    cannot be, by the splits, unless the file was built from other data)."""
    info = provenance(plan.warm_memory_file) if plan.warm_memory_file else None
    if info and (
        shared := set(info.get("chats", ()))
        & {t.task_id.split("/")[1].rsplit("_", 1)[0] for t in picked.get("sharegpt", ())}
    ):
        raise ConfigError(
            f"the warm memory {plan.warm_memory_file} was built from {len(shared)} chat(s) of "
            f"the sharegpt set (e.g. {min(shared)}); rebuild it with --build-warm-memory",
            param="warm_memory",
        )
    return info


def _make(name: str, ctx: SystemContext, plan: Plan) -> System:
    if (base := warm_base(name)) is not None:  # a memory system starting from the warm file
        return ParaspecSystem(
            name, ctx.llm, plugin_of(base), ctx.memory_file, warm_file=plan.warm_memory_file
        )
    return make_system(name, ctx)


def _prepare(names: list[str], ctx: SystemContext, run: Run) -> list[System]:
    ready = []
    for name in names:
        try:
            system = _make(name, ctx, run.plan)
            system.prepare()
        except SkipSystem as e:
            info = describe_skipped(warm_base(name) or name, str(e))
            run.systems[name] = dataclasses.replace(info, name=name)
            print(f"paraspec bench: skipping {name}: {e}", file=sys.stderr)
            continue
        run.systems[name] = system.info
        ready.append(system)
    return ready


def _warm_up(systems: list[System], tasks: dict[str, list[Dialogue]]) -> None:
    """One short untimed generation per system: first calls pay for lazy initialisation."""
    first = next((ts[0].first for ts in tasks.values() if ts), None)
    if first is None:
        return
    probe = dataclasses.replace(
        first, prompt_ids=first.prompt_ids[:64], max_new_tokens=8, task_id="warm-up"
    )
    for s in systems:
        s.begin_set("warm-up")
        s.run(probe, RunParams(target_tokens=8))


def _suite(
    suite: str,
    systems: list[System],
    tasks: dict[str, list[Dialogue]],
    modes: list[str],
    repeats: int,
    run: Run,
) -> None:
    """Each task by every system (interleaved), for each mode and repeat; a task of several turns
    turn by turn, each run answering its own conversation."""
    from tqdm import tqdm

    total = sum(d.turns for ts in tasks.values() for d in ts) * len(modes) * repeats * len(systems)
    with tqdm(
        total=total, desc=f"bench {suite}", unit="run", file=sys.stderr, dynamic_ncols=True
    ) as bar:
        for task_set, ts in tasks.items():
            for s in systems:
                s.begin_set(task_set)  # memory starts empty for every set
            for i, dia in enumerate(ts):
                # (never empty)
                if run.over_budget() and any(m.suite == suite for m in run.measurements):
                    run.notes.append(
                        f"{suite}: stopped at the --quick time budget ({run.plan.budget_s:.0f} s): "
                        f"{task_set} ran {i} of {len(ts)} tasks"
                    )
                    break
                for turn in range(dia.turns):
                    _turn(suite, systems, dia, i, turn, modes, repeats, run, bar)


def _turn(
    suite: str,
    systems: list[System],
    dia: Dialogue,
    i: int,
    turn: int,
    modes: list[str],
    repeats: int,
    run: Run,
    bar,
) -> None:
    """One turn of task i by every system, each mode and repeat, AR first (peers copy its count).
    A turn is a task to the memory systems (begin_task/end_task): every run of turn 2 starts from
    the memory after turn 1's first run, and finds its own turn 1 in its prompt."""
    for s in systems:
        s.begin_task()
    for mode in modes:
        for rep in range(repeats):
            ar_tokens = None
            for s in _run_order(systems, i * repeats + rep):
                key = (s.info.name, mode, rep)
                task = dia.task(turn, key)
                bar.set_postfix_str(f"{dia.turn_id(turn)[:32]} {s.info.name} {mode}", refresh=False)
                params = RunParams(
                    mode,
                    seed=run.plan.seed + 1000 * i + 100 * turn + rep,
                    repeat=rep,
                    target_tokens=ar_tokens,
                )
                m = None if task is None else _run_one(s, task, params, systems, run)
                bar.update(1)
                if m is None:
                    continue
                dia.answered(key, m.token_ids)
                if s.info.name == "ar":
                    ar_tokens = m.generated_tokens
                run.measurements.append(dataclasses.replace(m, suite=suite))
    for s in systems:
        s.end_task()


def _run_order(systems: list[System], turn: int) -> list[System]:
    """AR first (peers copy its token count), the others rotated by `turn`."""
    first = [s for s in systems if s.info.name == "ar"]
    rest = [s for s in systems if s.info.name != "ar"]
    k = turn % len(rest) if rest else 0
    return first + rest[k:] + rest[:k]


def _run_one(
    s: System, task: BenchTask, params: RunParams, systems: list[System], run: Run
) -> Measurement | None:
    """A paraspec failure is a bug and propagates; a peer that fails is dropped with a note."""
    if s.info.kind == "paraspec":
        return s.run(task, params)
    try:
        return s.run(task, params)
    except Exception as e:  # noqa: BLE001  (third-party code: report and go on)
        s.info.status, s.info.note = "skipped", f"failed on {task.task_id}: {type(e).__name__}: {e}"
        print(f"paraspec bench: dropping {s.info.name}: {s.info.note}", file=sys.stderr)
        systems.remove(s)
        s.close()
        return None


def _ttft_probe(systems: list[System], llm, run: Run, repeats: int = 3) -> None:
    """TTFT of AR vs the memory systems on one ~2k-token prompt (the trie indexes the prompt at
    prefill): a 1-token generation, interleaved, medians in the report."""
    probe = [
        s
        for s in systems
        if s.info.name == "ar"
        or (s.info.plugin_params or {}).get("plugin_type") in ("memory_decoding", "hybrid")
    ]
    if len(probe) < 2:
        return
    n = min(TTFT_PROMPT_TOKENS, llm.runner.max_seq_len - 8)
    text, ids = "", []
    for t in load_task_set("grounded"):
        text += t.text + "\n\n"
        ids = llm.tokenizer.encode(text)
        if len(ids) >= n:
            break
    task = BenchTask("ttft", f"grounded-concat-{n}", ids[:n], 1)
    for s in probe:
        s.begin_set("ttft")
    for rep in range(repeats):
        for s in probe:
            run.measurements.append(
                dataclasses.replace(s.run(task, RunParams(repeat=rep)), suite="ttft")
            )


def _forward_cost(llm, systems: list[System]) -> dict | None:
    """The runner's t(k)/t(1) curve that drafters size their drafts by. It is measured once, when
    the first drafter is built (in prepare, untimed), so this is the curve this run used."""
    if all(s.info.plugin_params is None for s in systems):
        return None
    # the few-row sizes most drafts are, then every 4th (padded forwards: a staircase of 4s)
    return {
        str(k): round(v, 3) for k, v in llm.runner.forward_cost().items() if k <= 4 or k % 4 == 0
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m paraspec.bench.run [flags]`: the same as `paraspec bench [flags]`."""
    parser = argparse.ArgumentParser(
        prog="python -m paraspec.bench.run", description="benchmark paraspec against its peers"
    )
    add_bench_flags(parser)
    return bench_main(parser.parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
