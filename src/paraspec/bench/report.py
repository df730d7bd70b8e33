"""results.json -> report.md (tables) and PNG plots. Pure reading: rerun it on any results.json,

    python -m paraspec.bench.report bench-out/results.json

Aggregation (what each number is):
  * per task and system, the median over repeats of decode tokens/s, TTFT and wall time;
  * speedup of a task = that median / paraspec AR's median on the same task (same suite and mode);
    a set's speedup = the median over its tasks (min and max shown beside it);
  * accepted tokens per step and forward passes per generated token are pooled over the set's
    runs (sum of tokens / sum of steps): short tasks do not weigh as much as long ones;
  * peak RSS delta and KV cache bytes: the largest seen over the set's runs;
  * greedy = AR: a paraspec system's greedy tokens must equal AR's on every task and repeat; for
    peers the mean fraction of AR's tokens they reproduce before the first difference (their
    numerics differ: information only).
Plots use matplotlib's Figure directly (no pyplot, no global backend).
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

MB = 1 << 20


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
    identical: tuple[int, int] | None      # paraspec, greedy: tasks equal to AR / tasks
    agreement: float | None                # peers, greedy: mean prefix agreement with AR


# ------------------------------------------------------------------------------------ aggregation

def _task_results(ms: list[dict]) -> dict[tuple, dict[str, TaskResult]]:
    """(suite, mode, task_set, task_id) -> system -> TaskResult."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for m in ms:
        groups[(m["suite"], m["mode"], m["task_set"], m["task_id"], m["system"])].append(m)
    out: dict[tuple, dict[str, TaskResult]] = defaultdict(dict)
    for (suite, mode, ts, tid, system), runs in groups.items():
        med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
        out[(suite, mode, ts, tid)][system] = TaskResult(system, tid, med("decode_tokens_per_s"), med("ttft_s"),
                                                         med("wall_s"), runs)
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
                    agree.append(statistics.mean(_prefix_agreement(r["token_ids"], ref) for r in tr.runs))
        runs = [r for _, tr in items for r in tr.runs]
        steps = sum(r["forward_passes"] - 1 for r in runs if r["mean_accepted_tokens_per_step"] is not None)
        emitted = sum(r["mean_accepted_tokens_per_step"] * (r["forward_passes"] - 1) for r in runs
                      if r["mean_accepted_tokens_per_step"] is not None)
        counted = [r for r in runs if r["forward_passes"] is not None]
        gen = sum(r["generated_tokens"] for r in counted)
        peaks = [r["peak_rss_delta_bytes"] for r in runs if r["peak_rss_delta_bytes"] is not None]
        kvs = [r["kv_cache_bytes"] for r in runs if r["kv_cache_bytes"] is not None]
        paraspec = kinds.get(name, "paraspec") == "paraspec"
        rows.append(Row(
            suite, mode, ts, name, len(items), statistics.median(tr.tps for _, tr in items),
            statistics.median(ratios) if ratios else None, min(ratios) if ratios else None,
            max(ratios) if ratios else None, emitted / steps if steps else None,
            sum(r["forward_passes"] for r in counted) / gen if gen else None,
            statistics.median(tr.ttft_s for _, tr in items), statistics.median(tr.wall_s for _, tr in items),
            max(peaks) / MB if peaks else None, max(kvs) / MB if kvs else None,
            (same, len(items)) if mode == "greedy" and paraspec and name != "ar" else None,
            statistics.mean(agree) if agree else None))
    order = {name: i for i, name in enumerate(results["systems"])}
    rows.sort(key=lambda r: (r.suite, r.mode, r.task_set, order.get(r.system, 1 << 30), r.system))
    return rows


def identity_failures(results: dict) -> list[str]:
    """Greedy runs of paraspec systems whose tokens differ from AR's on the same task."""
    kinds = {k: v["kind"] for k, v in results["systems"].items()}
    bad = []
    for (suite, mode, ts, tid), systems in _task_results(results["measurements"]).items():
        ar = systems.get("ar")
        if mode != "greedy" or ar is None:
            continue
        for name, tr in systems.items():
            if kinds.get(name) == "paraspec" and any(r["token_ids"] != ar.runs[0]["token_ids"] for r in tr.runs):
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
        out.append((text, system, _f(value, "{:.2f}x", "not measured"), verdict))

    def median(task_set: str, system: str) -> float | None:
        return getattr(main.get((task_set, system)), "speedup", None)

    for s in [s for s in systems if s.startswith("md-")]:
        check("memory_decoding >= 2.5x on grounded (median)", s, median("grounded", s), 2.5)
        check("memory_decoding >= 1.3x on HumanEval (median)", s, median("humaneval", s), 1.3)
        mins = [r.speedup_min for (_, name), r in main.items() if name == s and r.speedup_min is not None]
        check("memory_decoding >= 0.95x on every task", s, min(mins) if mins else None, 0.95)
    if "la" in systems:
        check("lookahead >= 1.5x on HumanEval (median)", "la", median("humaneval", "la"), 1.5)
        check("lookahead >= 1.3x on chat (median)", "la", median("chat", "la"), 1.3)
    if "hybrid" in systems:
        per_task = _task_results(results["measurements"])
        for ts in sorted({t for t, _ in main}):
            singles = [s for s in systems if (s.startswith("md-") or s == "la")
                       and getattr(main.get((ts, s)), "speedup", None) is not None]
            if (ts, "hybrid") not in main or not singles:
                continue
            best = max(singles, key=lambda s: main[(ts, s)].speedup)
            ratios = [r["hybrid"].tps / r[best].tps for (suite, mode, t, _), r in per_task.items()
                      if (suite, mode, t) == ("main", "greedy", ts) and "hybrid" in r and best in r
                      and r[best].tps > 0]
            if not ratios:
                continue
            point = statistics.median(ratios)
            lo, hi = bootstrap_median(ratios)
            verdict = "pass" if point >= 1.0 else "level, within noise" if hi >= 1.0 else "FAIL"
            out.append((f"hybrid >= the best single drafter on {ts} (here {best}; per-task ratio, median "
                        "and 90 % bootstrap interval)", "hybrid", f"{point:.3f}x ({lo:.3f}-{hi:.3f})", verdict))
    for s, ratio in ttft_ratios(results).items():
        out.append(("trie insertion adds <= 5 % to TTFT (2k-token prompt)", s, f"{(ratio - 1) * 100:+.1f} %",
                    "pass" if ratio <= 1.05 else "FAIL"))
    return out


def bootstrap_median(values: list[float], level: float = 0.9, resamples: int = 2000,
                     seed: int = 0) -> tuple[float, float]:
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
    sp = {s: statistics.median(v) for s, v in _speedups_by_system(rows, "sweep").items() if s.startswith(prefix)}
    return max(sp.items(), key=lambda kv: kv[1]) if sp else None


# --------------------------------------------------------------------------------------- markdown

def _f(v, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if v is None else fmt.format(v)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _set_table(rows: list[Row]) -> list[str]:
    header = ["system", "tasks", "decode tok/s", "speedup vs AR (min-max)", "accepted tok/step", "forwards/token",
              "TTFT ms", "wall s/task", "peak RSS Δ MB", "KV MB", "greedy = AR"]
    body = []
    for r in rows:
        same = f"{r.identical[0]}/{r.identical[1]}" if r.identical else \
            (f"{r.agreement * 100:.0f} % prefix" if r.agreement is not None else "-")
        sp = "1 (baseline)" if r.system == "ar" else \
            (f"**{r.speedup:.2f}x** ({r.speedup_min:.2f}-{r.speedup_max:.2f})" if r.speedup is not None else "-")
        body.append([r.system, str(r.tasks), f"{r.tps:.1f}", sp, _f(r.accepted_per_step), _f(r.forwards_per_token),
                     f"{r.ttft_s * 1000:.0f}", f"{r.wall_s:.2f}", _f(r.peak_rss_mb, "{:.0f}"), _f(r.kv_mb, "{:.1f}"),
                     same])
    return _table(header, body)


def markdown(results: dict, rows: list[Row], figures: dict[str, Path]) -> str:
    env, cfg = results["environment"], results["config"]
    L = [f"# paraspec bench{' (--quick: a smoke run, not evidence)' if cfg['quick'] else ''}", "",
         f"{env['date']}; model `{env['model']}`, {env['dtype']}"
         f"{', ' + env['quantization'] if env['quantization'] else ''}; "
         f"{env['cpu']} ({env['cpu_count']} CPUs; {' '.join(env.get('cpu_features') or []) or 'features not recorded'}; "
         f"kernels {env.get('kernels', '?')}), {env['torch_threads']} torch threads; torch {env['torch']}, "
         f"transformers {env['transformers']}, Python {env['python']}; commit `{env['git_commit']}`; "
         f"{results['wall_s']:.0f} s in all; load average at the end {_f(env.get('load_avg_at_end'), '{}')} "
         "(1, 5, 15 min).", "",
         f"**Memory (trie): pre-filled: "
         f"{'yes, from `' + str(cfg.get('memory_file')) + '`' if cfg['trie_prefilled'] else 'no'}.** Each "
         "memory_decoding system has a trie of its own, "
         f"{'loaded from that file' if cfg['trie_prefilled'] else 'empty'} when a task set begins; within a set "
         "it accumulates the system's outputs of the earlier tasks, as a server's memory would (the `repeated` "
         "set asks each request twice to show that). Repeats of one task all start from the same memory, so no "
         "run sees its own previous answer.", "",
         f"Method: every task is run by every system before the next task (AR first), {cfg['repeats']} repeat(s), "
         "medians per task; speedup = decode tokens/s (tokens after the first / time after the first) over "
         "paraspec AR's on the same task, median over the set's tasks. Peers generate AR's token count; "
         "transformers' first-token time is a separate 1-token call. Forward passes per generated token count the "
         "prefill as one (1.00 = plain decoding). Peak RSS Δ: the process's peak resident memory above its "
         "level at the start of each run (VmHWM reset through /proc/self/clear_refs), largest over the set "
         "(freed memory the allocator keeps is reused by later runs, so it shows what a run adds, not what it "
         "holds). KV: paraspec's preallocated per-request cache (prompt + max_new_tokens + draft rows, fp32 "
         "with a ones column); transformers: K and V of prompt + output in the model dtype (computed)."
         + (f" Forward cost t(k)/t(1) the engine measured and drafters used (k rows cost what the next multiple of 4 does): {env['forward_cost']}."
            if env.get("forward_cost") else ""), ""]
    L += ["## Systems", ""] + _table(["system", "kind", "what", "status"], [
        [k, v["kind"], v["description"], v["status"] + (f": {v['note']}" if v["note"] else "")]
        for k, v in results["systems"].items() if not _is_sweep(k)]) + [""]

    main = [r for r in rows if r.suite == "main"]
    sets = list(dict.fromkeys(r.task_set for r in main))
    for mode in ("greedy", "sampled"):
        mrows = [r for r in main if r.mode == mode]
        if not mrows:
            continue
        title = "Greedy" if mode == "greedy" else \
            f"Sampled (temperature {cfg['sampled']['temperature']}, top-p {cfg['sampled']['top_p']}, same seed)"
        L += [f"## {title}: speedup vs paraspec AR (median over tasks)", ""]
        names = list(dict.fromkeys(r.system for r in mrows))
        cell = {(r.task_set, r.system): r for r in mrows}
        L += _table(["system", *sets], [[n, *[_f(getattr(cell.get((s, n)), "speedup", None), "{:.2f}x")
                                            for s in sets]] for n in names]) + [""]
        if mode == "greedy" and "speedup" in figures:
            L += [f"![speedup per task set and system]({figures['speedup'].name})", ""]
        for s in sets:
            L += [f"### {s} ({mode})", ""] + _set_table([r for r in mrows if r.task_set == s]) + [""]
        if mode == "sampled":
            L += ["Sampled outputs are not compared token by token: parallel decoding is lossless in "
                  "distribution, and a draft changes which random numbers each token uses.", ""]

    cl = claims(results, rows)
    if cl:
        L += ["## Targets from the issues", ""] + _table(["claim", "system", "measured", "verdict"],
                                                        [list(c) for c in cl]) + [""]
        if cfg["quick"]:
            L += ["(--quick runs one or two short tasks per set: these verdicts are not evidence.)", ""]
    if "accept_hist" in figures:
        L += ["## Tokens per decode step", "", f"![accepted tokens per step]({figures['accept_hist'].name})", ""]
    sweep = [r for r in rows if r.suite == "sweep"]
    if sweep:
        L += ["## Sweeps (greedy, speedup vs AR, median over tasks)", ""]
        names = list(dict.fromkeys(r.system for r in sweep if r.system != "ar"))
        ssets = list(dict.fromkeys(r.task_set for r in sweep))
        cell = {(r.task_set, r.system): r for r in sweep}
        L += _table(["system", *ssets, "accepted tok/step", "forwards/token"], [
            [n, *[_f(getattr(cell.get((s, n)), "speedup", None), "{:.2f}x") for s in ssets],
             " / ".join(_f(getattr(cell.get((s, n)), "accepted_per_step", None)) for s in ssets),
             " / ".join(_f(getattr(cell.get((s, n)), "forwards_per_token", None)) for s in ssets)]
            for n in names]) + [""]
        for prefix, what in (("md-", "decoding_length"), ("la-", "(N, W, G)")):
            if (b := best_sweep(rows, prefix)) is not None:
                L += [f"Best {what} on this CPU: `{b[0]}` ({b[1]:.2f}x, median over the sweep's tasks).", ""]
        for key in ("sweep_md", "sweep_la"):
            if key in figures:
                L += [f"![{key}]({figures[key].name})", ""]
    if (tr := ttft_ratios(results)):
        n = next(m["prompt_tokens"] for m in results["measurements"] if m["suite"] == "ttft")
        L += [f"## TTFT on a {n}-token prompt (trie insertion at prefill)", ""] + _table(
            ["system", "TTFT / AR TTFT"], [[s, f"{v:.3f} ({(v - 1) * 100:+.1f} %)"] for s, v in tr.items()]) + [""]
    if results.get("serving"):
        sv = results["serving"]
        L += [f"## Through the server: {sv['requests']} {sv['task_set']} requests, max_tokens {sv['max_tokens']}, "
              f"memory_decoding {sv['plugin_params']}", ""]
        by = {(r["system"], r["concurrency"]): r for r in sv["runs"]}
        body = []
        for c in sorted({r["concurrency"] for r in sv["runs"]}):
            ar, md = by.get(("paraspec-ar", c)), by.get(("paraspec-md", c))
            body.append([str(c), _f(ar and ar["tokens_per_s"], "{:.1f}"), _f(md and md["tokens_per_s"], "{:.1f}"),
                         _f(md["tokens_per_s"] / ar["tokens_per_s"] if ar and md else None, "{:.2f}x"),
                         str(ar["texts"] == md["texts"]) if ar and md else "-"])
        L += _table(["concurrency", "AR tok/s", "memory_decoding tok/s", "speedup", "texts equal"], body) + [""]
        if "serving" in figures:
            L += [f"![speedup vs batch size]({figures['serving'].name})", ""]
    bad = identity_failures(results)
    notes = results.get("notes", []) + [f"LOSSLESSNESS FAILURE: {b}" for b in bad]
    if notes:
        L += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(L)


def _is_sweep(name: str) -> bool:
    return name.startswith("la-N") or name.startswith("md-tree-L") or name.startswith("md-chain-L")


# ------------------------------------------------------------------------------------------ plots

def _figure(w: float = 8, h: float = 4.5):
    from matplotlib.figure import Figure
    return Figure(figsize=(w, h), dpi=110, layout="constrained")


def plot_speedup(rows: list[Row], path: Path) -> Path | None:
    rs = [r for r in rows if r.suite == "main" and r.mode == "greedy" and r.system != "ar" and r.speedup is not None]
    if not rs:
        return None
    sets = list(dict.fromkeys(r.task_set for r in rs))
    systems = list(dict.fromkeys(r.system for r in rs))
    fig = _figure(max(6, 1.6 * len(sets) + 0.4 * len(sets) * len(systems) / 2), 4.5)
    ax = fig.add_subplot()
    width = 0.8 / len(systems)
    cell = {(r.task_set, r.system): r for r in rs}
    for j, s in enumerate(systems):
        xs = [i + (j - (len(systems) - 1) / 2) * width for i, ts in enumerate(sets) if (ts, s) in cell]
        rr = [cell[(ts, s)] for ts in sets if (ts, s) in cell]
        ax.bar(xs, [r.speedup for r in rr], width, label=s,
               yerr=[[r.speedup - r.speedup_min for r in rr], [r.speedup_max - r.speedup for r in rr]],
               capsize=2, error_kw={"lw": 0.8})
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(sets)), sets)
    ax.set_ylabel("decode speedup vs paraspec AR (median; bars: min-max task)")
    ax.set_title("Greedy decode speedup per task set")
    ax.legend(fontsize=8, ncols=min(4, len(systems)))
    fig.savefig(path)
    return path


def plot_accept_hist(results: dict, path: Path) -> Path | None:
    hists: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for m in results["measurements"]:
        if m["suite"] == "main" and m["mode"] == "greedy" and m["accepted_hist"] and m["system"] != "ar":
            for k, v in m["accepted_hist"].items():
                hists[m["system"]][int(k)] += v
    if not hists:
        return None
    names = list(hists)
    cols = min(3, len(names))
    rows_n = -(-len(names) // cols)
    from matplotlib.ticker import MaxNLocator

    fig = _figure(4 * cols, 2.8 * rows_n)
    axes = fig.subplots(rows_n, cols, squeeze=False)
    for ax, name in zip(axes.flat, names):
        h = hists[name]
        total = sum(h.values())
        ks = range(1, max(h) + 1)
        ax.bar(list(ks), [h.get(k, 0) / total for k in ks])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        mean = sum(k * v for k, v in h.items()) / total
        ax.set_title(f"{name}: mean {mean:.2f} tokens/step", fontsize=9)
        ax.set_xlabel("tokens emitted per decode step (bonus included)", fontsize=8)
        ax.set_ylabel("fraction of steps", fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.savefig(path)
    return path


def plot_sweep_md(rows: list[Row], path: Path) -> Path | None:
    rs = [r for r in rows if r.suite == "sweep" and r.system.startswith("md-") and r.speedup is not None]
    if not rs:
        return None
    fig = _figure(9, 4)
    ax1, ax2 = fig.subplots(1, 2)
    for ts in dict.fromkeys(r.task_set for r in rs):
        pts = sorted((int(r.system.rsplit("L", 1)[1]), r) for r in rs if r.task_set == ts)
        ax1.plot([p for p, _ in pts], [r.speedup for _, r in pts], marker="o", label=ts)
        ax2.plot([p for p, _ in pts], [r.accepted_per_step or 0 for _, r in pts], marker="o", label=ts)
    ax1.axhline(1.0, color="k", lw=0.8, ls="--")
    ax1.set_xlabel("decoding_length")
    ax1.set_ylabel("decode speedup vs AR")
    ax2.set_xlabel("decoding_length")
    ax2.set_ylabel("accepted tokens per step")
    ax1.legend(fontsize=8)
    fig.suptitle("memory_decoding (tree, static): speedup vs decoding_length")
    fig.savefig(path)
    return path


def plot_sweep_la(rows: list[Row], path: Path) -> Path | None:
    rs = [r for r in rows if r.suite == "sweep" and r.system.startswith("la-") and r.speedup is not None]
    if not rs:
        return None
    names = sorted(dict.fromkeys(r.system for r in rs))
    sets = list(dict.fromkeys(r.task_set for r in rs))
    cell = {(r.task_set, r.system): r for r in rs}
    fig = _figure(max(8, 0.45 * len(names) * len(sets)), 4.5)
    ax = fig.add_subplot()
    width = 0.8 / len(sets)
    for j, ts in enumerate(sets):
        xs = [i + (j - (len(sets) - 1) / 2) * width for i, n in enumerate(names) if (ts, n) in cell]
        ax.bar(xs, [cell[(ts, n)].speedup for n in names if (ts, n) in cell], width, label=ts)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(names)), [n[3:] for n in names], rotation=60, fontsize=8)
    ax.set_xlabel("lookahead N (level), W (window), G (guess set size)")
    ax.set_ylabel("decode speedup vs AR")
    ax.legend(fontsize=8)
    ax.set_title("lookahead: speedup vs (N, W, G)")
    fig.savefig(path)
    return path


def plot_serving(results: dict, path: Path) -> Path | None:
    sv = results.get("serving")
    if not sv or not sv.get("runs"):
        return None
    by = {(r["system"], r["concurrency"]): r["tokens_per_s"] for r in sv["runs"]}
    cs = sorted({c for _, c in by})
    fig = _figure(9, 4)
    ax1, ax2 = fig.subplots(1, 2)
    for s in ("paraspec-ar", "paraspec-md"):
        pts = [(c, by[(s, c)]) for c in cs if (s, c) in by]
        ax1.plot([c for c, _ in pts], [v for _, v in pts], marker="o", label=s)
    sp = [(c, by[("paraspec-md", c)] / by[("paraspec-ar", c)]) for c in cs
          if ("paraspec-md", c) in by and ("paraspec-ar", c) in by]
    ax2.plot([c for c, _ in sp], [v for _, v in sp], marker="o")
    ax2.axhline(1.0, color="k", lw=0.8, ls="--")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(cs, [str(c) for c in cs])
        ax.set_xlabel("concurrent requests (batch size)")
    ax1.set_ylabel("server tokens/s")
    ax2.set_ylabel("memory_decoding / AR tokens/s")
    ax1.legend(fontsize=8)
    fig.suptitle("Through `paraspec serve`: speedup vs batch size")
    fig.savefig(path)
    return path


# ------------------------------------------------------------------------------------------- entry

def write_report(results: dict, out: Path) -> list[Path]:
    """report.md and the PNGs that have data, in `out`; returns the files written."""
    out = Path(out)
    rows = summarize(results)
    makers = {"speedup": lambda p: plot_speedup(rows, p), "accept_hist": lambda p: plot_accept_hist(results, p),
              "sweep_md": lambda p: plot_sweep_md(rows, p), "sweep_la": lambda p: plot_sweep_la(rows, p),
              "serving": lambda p: plot_serving(results, p)}
    figures = {k: p for k, make in makers.items() if (p := make(out / f"{k}.png")) is not None}
    (out / "report.md").write_text(markdown(results, rows, figures) + "\n")
    return [out / "report.md", *figures.values()]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m paraspec.bench.report RESULTS.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    files = write_report(json.loads(path.read_text()), path.parent)
    print("\n".join(str(f) for f in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
