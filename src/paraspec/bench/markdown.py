"""The Markdown report: the run's environment and method, one table per task set and mode (and per
kind and turn where a set has several), the targets' verdicts, sweeps, TTFT and serving tables, and
notes (lossless failures among them)."""

from __future__ import annotations

from pathlib import Path

from .aggregate import (
    GEOMEAN,
    KindRow,
    Row,
    best_sweep,
    claims,
    identity_failures,
    kind_rows,
    ttft_ratios,
)

_MEMORY_PLUGINS = ("memory_decoding", "hybrid")


def _f(v, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if v is None else fmt.format(v)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def _set_table(rows: list[Row]) -> list[str]:
    header = [
        "system",
        "tasks",
        "decode tok/s",
        "speedup vs AR (min-max)",
        "accepted tok/step",
        "forwards/token",
        "TTFT ms",
        "wall s/task",
        "peak RSS Δ MB",
        "KV MB",
        "greedy = AR",
    ]
    body = []
    for r in rows:
        same = (
            f"{r.identical[0]}/{r.identical[1]}"
            if r.identical
            else (f"{r.agreement * 100:.0f} % prefix" if r.agreement is not None else "-")
        )
        sp = (
            "1 (baseline)"
            if r.system == "ar"
            else (
                f"**{r.speedup:.2f}x** ({r.speedup_min:.2f}-{r.speedup_max:.2f})"
                if r.speedup is not None
                else "-"
            )
        )
        body.append(
            [
                r.system,
                str(r.tasks),
                f"{r.tps:.1f}",
                sp,
                _f(r.accepted_per_step),
                _f(r.forwards_per_token),
                f"{r.ttft_s * 1000:.0f}",
                f"{r.wall_s:.2f}",
                _f(r.peak_rss_mb, "{:.0f}"),
                _f(r.kv_mb, "{:.1f}"),
                same,
            ]
        )
    return _table(header, body)


def _kind_table(rows: list[KindRow]) -> list[str]:
    """Rows: kinds (and turns); per system (AR aside) its median speedup vs AR / pooled tokens per step."""
    names = [n for n in dict.fromkeys(r.system for r in rows) if n != "ar"]
    turns = any(r.turn is not None for r in rows)
    cell = {(r.kind, r.turn, r.system): r for r in rows}
    body = []
    for kind, turn in dict.fromkeys((r.kind, r.turn) for r in rows):
        ar = cell.get((kind, turn, "ar"))
        label = f"**{GEOMEAN}**" if kind == GEOMEAN else kind
        body.append(
            [
                label,
                *([str(turn)] if turns else []),
                str(ar.tasks if ar else "-"),
                _f(ar and ar.tps, "{:.1f}") if kind != GEOMEAN else "",
                *[
                    f"{_f(getattr(cell.get((kind, turn, n)), 'speedup', None), '{:.2f}x')} / "
                    f"{_f(getattr(cell.get((kind, turn, n)), 'accepted_per_step', None))}"
                    for n in names
                ],
            ]
        )
    return _table(["kind", *(["turn"] if turns else []), "tasks", "AR tok/s", *names], body)


def _memory_label(name: str, info: dict, cfg: dict) -> str:
    """cold / warm / pre-filled, for the memory systems; a peer's own word for its draft state
    (llama-server's n-gram modes: cold); '-' for the others."""
    if (info.get("plugin_params") or {}).get("plugin_type") not in _MEMORY_PLUGINS:
        return info.get("memory") or "-"
    pre = f" + `{Path(cfg['memory_file']).name}`" if cfg.get("memory_file") else ""
    if name.endswith("+warm"):
        return f"**warm** (`{Path(str(cfg.get('warm_memory_file'))).name}`{pre})"
    return "pre-filled" + pre if pre else "cold"


def _memory_paragraph(cfg: dict) -> list[str]:
    warm = cfg.get("warm_memory") or {}
    if not cfg.get("warm_memory_file"):
        return []
    what = (
        (
            f"the greedy answers of `{warm.get('model')}` to {warm.get('n')} ShareGPT prompts of the warm "
            f"split ({warm.get('generated_tokens')} tokens; never benchmarked, no chat shared with the `sharegpt` "
            "set, no MT-Bench question)"
        )
        if warm
        else "a memory file with no record of how it was built"
    )
    return [
        f"**Cold and warm.** A system named `<system>+warm` is that system with its memory starting each "
        f"set from `{cfg['warm_memory_file']}`: {what}. The same system without the suffix starts cold, "
        "from the prompt and its own outputs.",
        "",
    ]


def markdown(results: dict, rows: list[Row], figures: dict[str, Path]) -> str:
    env, cfg = results["environment"], results["config"]
    L = [
        f"# paraspec bench{' (--quick: a smoke run, not evidence)' if cfg['quick'] else ''}",
        "",
        f"{env['date']}; model `{env['model']}`, {env['dtype']}"
        f"{', ' + env['quantization'] if env['quantization'] else ''}, "
        f"KV cache {env.get('kv_cache_dtype', 'fp32')}; int8 activation passes {env.get('activation_passes', 2)}; {env['cpu']} ({env['cpu_count']} CPUs; {' '.join(env.get('cpu_features') or []) or 'features not recorded'}; "
        f"kernels {env.get('kernels', '?')}), {env['torch_threads']} torch threads; torch {env['torch']}, "
        f"transformers {env['transformers']}, Python {env['python']}; commit `{env['git_commit']}`; "
        f"{results['wall_s']:.0f} s in all; load average at the end {_f(env.get('load_avg_at_end'), '{}')} "
        "(1, 5, 15 min).",
        "",
        f"**Memory (trie): pre-filled: "
        f"{'yes, from `' + str(cfg.get('memory_file')) + '`' if cfg['trie_prefilled'] else 'no'}.** Each "
        "memory_decoding system has a trie of its own, "
        f"{'loaded from that file' if cfg['trie_prefilled'] else 'empty'} when a task set begins; within a set "
        "it accumulates the system's outputs of the earlier tasks, as a server's memory would (the `repeated` "
        "set asks each request twice to show that). Repeats of one task all start from the same memory, so no "
        "run sees its own previous answer. A task of several turns (mtbench) is measured turn by turn "
        "(`<id>#<turn>`): each system's second turn follows its own first answer.",
        "",
        f"Method: every task is run by every system before the next task (AR first), {cfg['repeats']} repeat(s), "
        "medians per task; speedup = decode tokens/s (tokens after the first / time after the first) over "
        "paraspec AR's on the same task, median over the set's tasks. Peers generate AR's token count; "
        "transformers' first-token time is a separate 1-token call. Forward passes per generated token count the "
        "prefill as one (1.00 = plain decoding). Peak RSS Δ: the process's peak resident memory above its "
        "level at the start of each run (VmHWM reset through /proc/self/clear_refs), largest over the set "
        "(freed memory the allocator keeps is reused by later runs, so it shows what a run adds, not what it "
        "holds). KV: paraspec's preallocated per-request cache (prompt + max_new_tokens + draft rows, fp32 "
        "with a ones column); transformers: K and V of prompt + output in the model dtype (computed)."
        + (
            f" Forward cost t(k)/t(1) the engine probed at start-up and shaped (drafters price rows by it; the engine then refreshes it from its own steps): {env['forward_cost']}."
            if env.get("forward_cost")
            else ""
        ),
        "",
    ]
    L += _memory_paragraph(cfg)
    L += (
        ["## Systems", ""]
        + _table(
            ["system", "kind", "what", "status", "memory"],
            [
                [
                    k,
                    v["kind"],
                    v["description"],
                    v["status"] + (f": {v['note']}" if v["note"] else ""),
                    _memory_label(k, v, cfg),
                ]
                for k, v in results["systems"].items()
                if not _is_sweep(k)
            ],
        )
        + [""]
    )
    per_kind = kind_rows(results)

    main = [r for r in rows if r.suite == "main"]
    sets = list(dict.fromkeys(r.task_set for r in main))
    for mode in ("greedy", "sampled"):
        mrows = [r for r in main if r.mode == mode]
        if not mrows:
            continue
        title = (
            "Greedy"
            if mode == "greedy"
            else f"Sampled (temperature {cfg['sampled']['temperature']}, top-p {cfg['sampled']['top_p']}, same seed)"
        )
        L += [f"## {title}: speedup vs paraspec AR (median over tasks)", ""]
        names = list(dict.fromkeys(r.system for r in mrows))
        cell = {(r.task_set, r.system): r for r in mrows}
        L += _table(
            ["system", *sets],
            [
                [n, *[_f(getattr(cell.get((s, n)), "speedup", None), "{:.2f}x") for s in sets]]
                for n in names
            ],
        ) + [""]
        if mode == "greedy" and "speedup" in figures:
            L += [f"![speedup per task set and system]({figures['speedup'].name})", ""]
        for s in sets:
            L += (
                [f"### {s} ({mode})", ""] + _set_table([r for r in mrows if r.task_set == s]) + [""]
            )
            if krows := [r for r in per_kind if (r.mode, r.task_set) == (mode, s)]:
                L += [
                    f"#### {s} per kind ({mode}): speedup vs AR (median over the kind's tasks) / accepted "
                    f"tokens per step; {GEOMEAN}: geometric mean over the kinds",
                    "",
                ]
                L += _kind_table(krows) + [""]
        if mode == "sampled":
            L += [
                "Sampled outputs are not compared token by token: parallel decoding is lossless in "
                "distribution, and a draft changes which random numbers each token uses.",
                "",
            ]

    cl = claims(results, rows)
    if cl:
        L += (
            ["## Targets from the issues", ""]
            + _table(["claim", "system", "measured", "verdict"], [list(c) for c in cl])
            + [""]
        )
        if cfg["quick"]:
            L += [
                "(--quick runs one or two short tasks per set: these verdicts are not evidence.)",
                "",
            ]
    if "accept_hist" in figures:
        L += [
            "## Tokens per decode step",
            "",
            f"![accepted tokens per step]({figures['accept_hist'].name})",
            "",
        ]
    sweep = [r for r in rows if r.suite == "sweep"]
    if sweep:
        L += ["## Sweeps (greedy, speedup vs AR, median over tasks)", ""]
        names = list(dict.fromkeys(r.system for r in sweep if r.system != "ar"))
        ssets = list(dict.fromkeys(r.task_set for r in sweep))
        cell = {(r.task_set, r.system): r for r in sweep}
        L += _table(
            ["system", *ssets, "accepted tok/step", "forwards/token"],
            [
                [
                    n,
                    *[_f(getattr(cell.get((s, n)), "speedup", None), "{:.2f}x") for s in ssets],
                    " / ".join(
                        _f(getattr(cell.get((s, n)), "accepted_per_step", None)) for s in ssets
                    ),
                    " / ".join(
                        _f(getattr(cell.get((s, n)), "forwards_per_token", None)) for s in ssets
                    ),
                ]
                for n in names
            ],
        ) + [""]
        for prefix, what in (("md-", "decoding_length"), ("la-", "(N, W, G)")):
            if (b := best_sweep(rows, prefix)) is not None:
                L += [
                    f"Best {what} on this CPU: `{b[0]}` ({b[1]:.2f}x, median over the sweep's tasks).",
                    "",
                ]
        for key in ("sweep_md", "sweep_la"):
            if key in figures:
                L += [f"![{key}]({figures[key].name})", ""]
    if tr := ttft_ratios(results):
        n = next(m["prompt_tokens"] for m in results["measurements"] if m["suite"] == "ttft")
        L += (
            [f"## TTFT on a {n}-token prompt (trie insertion at prefill)", ""]
            + _table(
                ["system", "TTFT / AR TTFT"],
                [[s, f"{v:.3f} ({(v - 1) * 100:+.1f} %)"] for s, v in tr.items()],
            )
            + [""]
        )
    if results.get("serving"):
        sv = results["serving"]
        L += [
            f"## Through the server: {sv['requests']} {sv['task_set']} requests, max_tokens {sv['max_tokens']}, "
            f"memory_decoding {sv['plugin_params']}",
            "",
        ]
        by = {(r["system"], r["concurrency"]): r for r in sv["runs"]}
        body = []
        for c in sorted({r["concurrency"] for r in sv["runs"]}):
            ar, md = by.get(("paraspec-ar", c)), by.get(("paraspec-md", c))
            body.append(
                [
                    str(c),
                    _f(ar and ar["tokens_per_s"], "{:.1f}"),
                    _f(md and md["tokens_per_s"], "{:.1f}"),
                    _f(md["tokens_per_s"] / ar["tokens_per_s"] if ar and md else None, "{:.2f}x"),
                    str(ar["texts"] == md["texts"]) if ar and md else "-",
                ]
            )
        L += _table(
            ["concurrency", "AR tok/s", "memory_decoding tok/s", "speedup", "texts equal"], body
        ) + [""]
        if "serving" in figures:
            L += [f"![speedup vs batch size]({figures['serving'].name})", ""]
    bad = identity_failures(results)
    notes = results.get("notes", []) + [f"LOSSLESSNESS FAILURE: {b}" for b in bad]
    if notes:
        L += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(L)


def _is_sweep(name: str) -> bool:
    return name.startswith("la-N") or name.startswith("md-tree-L") or name.startswith("md-chain-L")
