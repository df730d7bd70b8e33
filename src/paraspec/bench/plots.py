"""The report's PNG plots, drawn with matplotlib's Figure directly (no pyplot, no global backend).
Each returns the path it wrote, or None when the run has no data for it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .aggregate import Row


def _figure(w: float = 8, h: float = 4.5):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=110, layout="constrained")


def _parity(ax) -> None:
    """The dashed line at 1.0: as fast as AR."""
    ax.axhline(1.0, color="k", lw=0.8, ls="--")


def plot_speedup(rows: list[Row], path: Path) -> Path | None:
    rs = [
        r
        for r in rows
        if r.suite == "main" and r.mode == "greedy" and r.system != "ar" and r.speedup is not None
    ]
    if not rs:
        return None
    sets = list(dict.fromkeys(r.task_set for r in rs))
    systems = list(dict.fromkeys(r.system for r in rs))
    fig = _figure(max(6, 1.6 * len(sets) + 0.4 * len(sets) * len(systems) / 2), 4.5)
    ax = fig.add_subplot()
    width = 0.8 / len(systems)
    cell = {(r.task_set, r.system): r for r in rs}
    for j, s in enumerate(systems):
        xs = [
            i + (j - (len(systems) - 1) / 2) * width for i, ts in enumerate(sets) if (ts, s) in cell
        ]
        rr = [cell[(ts, s)] for ts in sets if (ts, s) in cell]
        ax.bar(
            xs,
            [r.speedup for r in rr],
            width,
            label=s,
            yerr=[[r.speedup - r.speedup_min for r in rr], [r.speedup_max - r.speedup for r in rr]],
            capsize=2,
            error_kw={"lw": 0.8},
        )
    _parity(ax)
    ax.set_xticks(range(len(sets)), sets)
    ax.set_ylabel("decode speedup vs paraspec AR (median; bars: min-max task)")
    ax.set_title("Greedy decode speedup per task set")
    ax.legend(fontsize=8, ncols=min(4, len(systems)))
    fig.savefig(path)
    return path


def plot_accept_hist(results: dict, path: Path) -> Path | None:
    hists: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for m in results["measurements"]:
        if (
            m["suite"] == "main"
            and m["mode"] == "greedy"
            and m["accepted_hist"]
            and m["system"] != "ar"
        ):
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
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.savefig(path)
    return path


def _sweep_rows(rows: list[Row], prefix: str) -> list[Row]:
    return [
        r
        for r in rows
        if r.suite == "sweep" and r.system.startswith(prefix) and r.speedup is not None
    ]


def plot_sweep_md(rows: list[Row], path: Path) -> Path | None:
    if not (rs := _sweep_rows(rows, "md-")):
        return None
    fig = _figure(9, 4)
    ax1, ax2 = fig.subplots(1, 2)
    for ts in dict.fromkeys(r.task_set for r in rs):
        pts = sorted((int(r.system.rsplit("L", 1)[1]), r) for r in rs if r.task_set == ts)
        ax1.plot([p for p, _ in pts], [r.speedup for _, r in pts], marker="o", label=ts)
        ax2.plot(
            [p for p, _ in pts], [r.accepted_per_step or 0 for _, r in pts], marker="o", label=ts
        )
    _parity(ax1)
    ax1.set(xlabel="decoding_length", ylabel="decode speedup vs AR")
    ax2.set(xlabel="decoding_length", ylabel="accepted tokens per step")
    ax1.legend(fontsize=8)
    fig.suptitle("memory_decoding (tree, static): speedup vs decoding_length")
    fig.savefig(path)
    return path


def plot_sweep_la(rows: list[Row], path: Path) -> Path | None:
    if not (rs := _sweep_rows(rows, "la-")):
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
    _parity(ax)
    ax.set_xticks(range(len(names)), [n[3:] for n in names], rotation=60, fontsize=8)
    ax.set(
        xlabel="lookahead N (level), W (window), G (guess set size)", ylabel="decode speedup vs AR"
    )
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
    sp = [
        (c, by[("paraspec-md", c)] / by[("paraspec-ar", c)])
        for c in cs
        if ("paraspec-md", c) in by and ("paraspec-ar", c) in by
    ]
    ax2.plot([c for c, _ in sp], [v for _, v in sp], marker="o")
    _parity(ax2)
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
