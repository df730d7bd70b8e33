"""bench/plots: a PNG for each plot that has data, None for one that has none."""

from __future__ import annotations

import dataclasses

from paraspec.bench.aggregate import summarize
from paraspec.bench.plots import (
    plot_accept_hist,
    plot_serving,
    plot_speedup,
    plot_sweep_la,
    plot_sweep_md,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plots_with_data_write_pngs(hand_results, tmp_path):
    rows = summarize(hand_results)
    for name, plot in (
        ("speedup", lambda p: plot_speedup(rows, p)),
        ("accept_hist", lambda p: plot_accept_hist(hand_results, p)),
    ):
        path = tmp_path / f"{name}.png"
        assert plot(path) == path and path.read_bytes()[:8] == PNG_MAGIC


def test_sweep_and_serving_plots(hand_results, tmp_path):
    row = next(r for r in summarize(hand_results) if r.system == "md-tree")
    sweep = [
        dataclasses.replace(row, suite="sweep", system=n, speedup=s)
        for n, s in (
            ("md-tree-L4", 1.5),
            ("md-tree-L16", 2.5),
            ("la-N4W5G5", 1.2),
            ("la-N3W3G3", 1.1),
        )
    ]
    assert plot_sweep_md(sweep, tmp_path / "md.png").read_bytes()[:8] == PNG_MAGIC
    assert plot_sweep_la(sweep, tmp_path / "la.png").read_bytes()[:8] == PNG_MAGIC
    hand_results["serving"] = {
        "runs": [
            {"system": s, "concurrency": c, "tokens_per_s": 10.0 * c * (2 if "md" in s else 1)}
            for s in ("paraspec-ar", "paraspec-md")
            for c in (1, 2)
        ]
    }
    assert plot_serving(hand_results, tmp_path / "serving.png").read_bytes()[:8] == PNG_MAGIC


def test_nothing_to_plot_writes_nothing(hand_results, tmp_path):
    ar_only = dict(
        hand_results, measurements=[m for m in hand_results["measurements"] if m["system"] == "ar"]
    )
    rows = summarize(ar_only)
    assert plot_speedup(rows, tmp_path / "a.png") is None
    assert plot_accept_hist(ar_only, tmp_path / "b.png") is None
    assert (
        plot_sweep_md(rows, tmp_path / "c.png") is None
        and plot_sweep_la(rows, tmp_path / "d.png") is None
    )
    assert plot_serving(ar_only, tmp_path / "e.png") is None
    assert list(tmp_path.iterdir()) == []
