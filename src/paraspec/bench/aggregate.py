"""results.json -> numbers: per-task medians, per-set rows, speedups, the bootstrap interval and the
verdicts on the issues' targets. Pure functions of the measurements (markdown.py and plots.py draw them).

What each number is:
  * per task and system, the median over repeats of decode tokens/s, TTFT and wall time;
  * speedup of a task = that median / paraspec AR's median on the same task (same suite and mode);
    a set's speedup = the median over its tasks (min and max shown beside it);
  * accepted tokens per step and forward passes per generated token are pooled over the set's
    runs (sum of tokens / sum of steps): short tasks do not weigh as much as long ones;
  * peak RSS delta and KV cache bytes: the largest seen over the set's runs;
  * greedy = AR: a paraspec system's greedy tokens must equal AR's on every task and repeat; for
    peers the mean fraction of AR's tokens they reproduce before the first difference (their
    numerics differ: information only);
  * per kind (an MT-Bench category, a ShareGPT kind; and per turn where tasks have several), as
    Spec-Bench reports: the median speedup over the kind's tasks beside the pooled tokens per step,
    then the geometric mean of both over the kinds.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

MB = 1 << 20
GEOMEAN = "geomean"  # KindRow.kind of the geometric mean over a set's kinds


@dataclass
class TaskResult:
    """One task by one system, over its repeats."""

    system: str
    task_id: str
    tps: float
    ttft_s: float
    wall_s: float
    runs: list[dict]


@dataclass
class Row:
    """One system on one task set (one suite and mode)."""

    suite: str
    mode: str
    task_set: str
    system: str
    tasks: int
    tps: float
    speedup: float | None
    speedup_min: float | None
    speedup_max: float | None
    accepted_per_step: float | None
    forwards_per_token: float | None
    ttft_s: float
    wall_s: float
    peak_rss_mb: float | None
    kv_mb: float | None
    identical: tuple[int, int] | None  # paraspec, greedy: tasks equal to AR / tasks
    agreement: float | None  # peers, greedy: mean prefix agreement with AR


@dataclass
class KindRow:
    """One system on the tasks of one kind of a set (main suite), at one turn (None: single-turn)."""

    mode: str
    task_set: str
    kind: str  # or GEOMEAN: over the set's kinds at this turn
    turn: int | None
    system: str
    tasks: int
    tps: float | None  # median decode tok/s (None on the geometric-mean row)
    speedup: float | None
    accepted_per_step: float | None


# ------------------------------------------------------------------------------------ aggregation


def _task_results(ms: list[dict]) -> dict[tuple, dict[str, TaskResult]]:
    """(suite, mode, task_set, task_id) -> system -> TaskResult."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for m in ms:
        groups[(m["suite"], m["mode"], m["task_set"], m["task_id"], m["system"])].append(m)
    out: dict[tuple, dict[str, TaskResult]] = defaultdict(dict)
    for (suite, mode, ts, tid, system), runs in groups.items():
        med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
        out[(suite, mode, ts, tid)][system] = TaskResult(
            system, tid, med("decode_tokens_per_s"), med("ttft_s"), med("wall_s"), runs
        )
    return out


def _prefix_agreement(a: list[int], b: list[int]) -> float:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return n / len(b) if b else 1.0


def summarize(results: dict) -> list[Row]:
    kinds = {k: v["kind"] for k, v in results["systems"].items()}
    by_set: dict[tuple, list[tuple[dict[str, TaskResult], TaskResult]]] = defaultdict(list)
    for (suite, mode, ts, _), systems in _task_results(results["measurements"]).items():
        for name, tr in systems.items():
            by_set[(suite, mode, ts, name)].append((systems, tr))
    rows = []
    for (suite, mode, ts, name), items in by_set.items():
        ratios, same, agree = [], 0, []
        for systems, tr in items:
            ar = systems.get("ar")
            if ar is not None and ar.tps > 0:
                ratios.append(tr.tps / ar.tps)
            if ar is not None and mode == "greedy" and name != "ar":
                ref = ar.runs[0]["token_ids"]
                if kinds.get(name, "paraspec") == "paraspec":
                    same += all(r["token_ids"] == ref for r in tr.runs)
                else:
                    agree.append(
                        statistics.mean(_prefix_agreement(r["token_ids"], ref) for r in tr.runs)
                    )
        runs = [r for _, tr in items for r in tr.runs]
        counted = [r for r in runs if r["forward_passes"] is not None]
        gen = sum(r["generated_tokens"] for r in counted)
        peaks = [r["peak_rss_delta_bytes"] for r in runs if r["peak_rss_delta_bytes"] is not None]
        kvs = [r["kv_cache_bytes"] for r in runs if r["kv_cache_bytes"] is not None]
        paraspec = kinds.get(name, "paraspec") == "paraspec"
        rows.append(
            Row(
                suite,
                mode,
                ts,
                name,
                len(items),
                statistics.median(tr.tps for _, tr in items),
                statistics.median(ratios) if ratios else None,
                min(ratios) if ratios else None,
                max(ratios) if ratios else None,
                _accepted_per_step(runs),
                sum(r["forward_passes"] for r in counted) / gen if gen else None,
                statistics.median(tr.ttft_s for _, tr in items),
                statistics.median(tr.wall_s for _, tr in items),
                max(peaks) / MB if peaks else None,
                max(kvs) / MB if kvs else None,
                (same, len(items)) if mode == "greedy" and paraspec and name != "ar" else None,
                statistics.mean(agree) if agree else None,
            )
        )
    order = {name: i for i, name in enumerate(results["systems"])}
    rows.sort(key=lambda r: (r.suite, r.mode, r.task_set, order.get(r.system, 1 << 30), r.system))
    return rows


def _accepted_per_step(runs: list[dict]) -> float | None:
    """Tokens per decode step pooled over runs (sum of tokens / sum of steps); None: not counted."""
    known = [
        (r["mean_accepted_tokens_per_step"], r["forward_passes"] - 1)
        for r in runs
        if r["mean_accepted_tokens_per_step"] is not None and r["forward_passes"] is not None
    ]
    steps = sum(n for _, n in known)
    return sum(a * n for a, n in known) / steps if steps else None


def task_kinds(results: dict) -> dict[tuple[str, str], tuple[str, int | None]]:
    """(task_set, task_id) -> (kind, turn), in the run's task order. results.json files from before
    kinds were recorded: the kind is the id up to its first "/", and every task has one turn."""
    out = {}
    for t in results.get("tasks", []):
        out[(t["task_set"], t["task_id"])] = (
            t.get("kind") or t["task_id"].split("/", 1)[0],
            t.get("turn"),
        )
    for m in results["measurements"]:
        out.setdefault((m["task_set"], m["task_id"]), (m["task_id"].split("/", 1)[0], None))
    return out


def kind_rows(results: dict) -> list[KindRow]:
    """Per kind and turn of every main-suite set with more than one (kind, turn), then GEOMEAN rows."""
    kinds = task_kinds(results)
    groups: dict[tuple, list[tuple[dict[str, TaskResult], TaskResult]]] = defaultdict(list)
    for (suite, mode, ts, tid), systems in _task_results(results["measurements"]).items():
        if suite == "main":
            kind, turn = kinds[(ts, tid)]
            for name, tr in systems.items():
                groups[(mode, ts, kind, turn, name)].append((systems, tr))
    shapes: dict[tuple, set] = defaultdict(set)
    for mode, ts, kind, turn, _ in groups:
        shapes[(mode, ts)].add((kind, turn))
    rows = []
    for (mode, ts, kind, turn, name), items in groups.items():
        if len(shapes[(mode, ts)]) < 2:
            continue
        ratios = [tr.tps / s["ar"].tps for s, tr in items if "ar" in s and s["ar"].tps > 0]
        speedup = statistics.median(ratios) if ratios else None
        rows.append(
            KindRow(
                mode,
                ts,
                kind,
                turn,
                name,
                len(items),
                statistics.median(tr.tps for _, tr in items),
                speedup,
                _accepted_per_step([r for _, tr in items for r in tr.runs]),
            )
        )
    means: dict[tuple, list[KindRow]] = defaultdict(list)
    for r in rows:
        means[(r.mode, r.task_set, r.turn, r.system)].append(r)
    for (mode, ts, turn, name), rs in means.items():
        rows.append(
            KindRow(
                mode,
                ts,
                GEOMEAN,
                turn,
                name,
                sum(r.tasks for r in rs),
                None,
                _geomean([r.speedup for r in rs]),
                _geomean([r.accepted_per_step for r in rs]),
            )
        )
    kind_order = {k: i for i, k in enumerate(dict.fromkeys(k for k, _ in kinds.values()))}
    kind_order[GEOMEAN] = len(kind_order)
    order = {name: i for i, name in enumerate(results["systems"])}
    rows.sort(
        key=lambda r: (
            r.mode,
            r.task_set,
            kind_order[r.kind],
            r.turn or 0,
            order.get(r.system, 1 << 30),
            r.system,
        )
    )
    return rows


def _geomean(values: list[float | None]) -> float | None:
    vs = [v for v in values if v is not None and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in vs)) if vs else None


def identity_failures(results: dict) -> list[str]:
    """Greedy runs of paraspec systems whose tokens differ from AR's on the same task."""
    kinds = {k: v["kind"] for k, v in results["systems"].items()}
    bad = []
    for (suite, mode, ts, tid), systems in _task_results(results["measurements"]).items():
        ar = systems.get("ar")
        if mode != "greedy" or ar is None:
            continue
        for name, tr in systems.items():
            if kinds.get(name) == "paraspec" and any(
                r["token_ids"] != ar.runs[0]["token_ids"] for r in tr.runs
            ):
                bad.append(f"{name} differs from AR on {suite}/{ts}/{tid}")
    return bad


def _speedups_by_system(rows: list[Row], suite: str) -> dict[str, list[float]]:
    """system -> per-task speedups over all sets of a suite (greedy)."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.suite == suite and r.mode == "greedy" and r.speedup is not None:
            out[r.system].append(r.speedup)
    return out


# ----------------------------------------------------------------------------------------- claims


def claims(results: dict, rows: list[Row]) -> list[tuple[str, str, str, str]]:
    """(claim, system, measured, verdict) for the targets the issues set."""
    main = {(r.task_set, r.system): r for r in rows if r.suite == "main" and r.mode == "greedy"}
    systems = sorted({s for _, s in main})
    out = []

    def check(text: str, system: str, value: float | None, target: float) -> None:
        verdict = "-" if value is None else "pass" if value >= target else "FAIL"
        out.append((text, system, "not measured" if value is None else f"{value:.2f}x", verdict))

    def median(task_set: str, system: str) -> float | None:
        return getattr(main.get((task_set, system)), "speedup", None)

    for s in [s for s in systems if s.startswith("md-")]:
        check("memory_decoding >= 2.5x on grounded (median)", s, median("grounded", s), 2.5)
        check("memory_decoding >= 1.3x on HumanEval (median)", s, median("humaneval", s), 1.3)
        mins = [
            r.speedup_min
            for (_, name), r in main.items()
            if name == s and r.speedup_min is not None
        ]
        check("memory_decoding >= 0.95x on every task", s, min(mins) if mins else None, 0.95)
    if "la" in systems:
        check("lookahead >= 1.5x on HumanEval (median)", "la", median("humaneval", "la"), 1.5)
        check("lookahead >= 1.3x on chat (median)", "la", median("chat", "la"), 1.3)
    if "hybrid" in systems:
        per_task = _task_results(results["measurements"])
        for ts in sorted({t for t, _ in main}):
            singles = [
                s
                for s in systems
                if (s.startswith("md-") or s == "la")
                and getattr(main.get((ts, s)), "speedup", None) is not None
            ]
            if (ts, "hybrid") not in main or not singles:
                continue
            best = max(singles, key=lambda s: main[(ts, s)].speedup)
            ratios = [
                r["hybrid"].tps / r[best].tps
                for (suite, mode, t, _), r in per_task.items()
                if (suite, mode, t) == ("main", "greedy", ts)
                and "hybrid" in r
                and best in r
                and r[best].tps > 0
            ]
            if not ratios:
                continue
            point = statistics.median(ratios)
            lo, hi = bootstrap_median(ratios)
            verdict = "pass" if point >= 1.0 else "level, within noise" if hi >= 1.0 else "FAIL"
            out.append(
                (
                    f"hybrid >= the best single drafter on {ts} (here {best}; per-task ratio, median "
                    "and 90 % bootstrap interval)",
                    "hybrid",
                    f"{point:.3f}x ({lo:.3f}-{hi:.3f})",
                    verdict,
                )
            )
    for s, ratio in ttft_ratios(results).items():
        out.append(
            (
                "trie insertion adds <= 5 % to TTFT (2k-token prompt)",
                s,
                f"{(ratio - 1) * 100:+.1f} %",
                "pass" if ratio <= 1.05 else "FAIL",
            )
        )
    return out


def bootstrap_median(
    values: list[float], level: float = 0.9, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of `values` (over tasks): a deficit every task
    shows is real however small, one within the tasks' scatter around 1 is not shown."""
    import random

    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1.0 - level) / 2
    return meds[int(tail * resamples)], meds[min(resamples - 1, int((1.0 - tail) * resamples))]


def ttft_ratios(results: dict) -> dict[str, float]:
    """system -> median TTFT / AR's median TTFT on the TTFT probe prompt."""
    t: dict[str, list[float]] = defaultdict(list)
    for m in results["measurements"]:
        if m["suite"] == "ttft":
            t[m["system"]].append(m["ttft_s"])
    if "ar" not in t:
        return {}
    ar = statistics.median(t["ar"])
    return {s: statistics.median(v) / ar for s, v in t.items() if s != "ar"}


def best_sweep(rows: list[Row], prefix: str) -> tuple[str, float] | None:
    sp = {
        s: statistics.median(v)
        for s, v in _speedups_by_system(rows, "sweep").items()
        if s.startswith(prefix)
    }
    return max(sp.items(), key=lambda kv: kv[1]) if sp else None
