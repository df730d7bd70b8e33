"""bench/report: report.md and the plots that have data, rewritten from any results.json."""

from __future__ import annotations

import json

from paraspec.bench.report import main, write_report


def test_write_report_lists_what_it_wrote(hand_results, tmp_path):
    files = write_report(hand_results, tmp_path)
    assert files == [tmp_path / "report.md", tmp_path / "speedup.png", tmp_path / "accept_hist.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "accept_hist.png",
        "report.md",
        "speedup.png",
    ]


def test_main_rewrites_the_report_next_to_the_json(hand_results, tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(hand_results))
    assert main([str(path)]) == 0
    assert (tmp_path / "report.md").read_text().startswith("# paraspec bench")
    assert str(tmp_path / "report.md") in capsys.readouterr().out
    assert main([]) == 2 and "usage:" in capsys.readouterr().err
