"""results.json -> report.md and PNG plots (aggregate.py, markdown.py, plots.py). Pure reading: rerun
it on any results.json,

    python -m paraspec.bench.report bench-out/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .aggregate import summarize
from .markdown import markdown
from .plots import plot_accept_hist, plot_serving, plot_speedup, plot_sweep_la, plot_sweep_md


def write_report(results: dict, out: Path) -> list[Path]:
    """report.md and the PNGs that have data, in `out`; returns the files written."""
    out = Path(out)
    rows = summarize(results)
    makers = {
        "speedup": lambda p: plot_speedup(rows, p),
        "accept_hist": lambda p: plot_accept_hist(results, p),
        "sweep_md": lambda p: plot_sweep_md(rows, p),
        "sweep_la": lambda p: plot_sweep_la(rows, p),
        "serving": lambda p: plot_serving(results, p),
    }
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
