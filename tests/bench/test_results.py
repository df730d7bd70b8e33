"""bench/results: results.json (environment, config, systems, every measurement), the report beside it,
and the exit code a lossless failure gives."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from paraspec.bench import results as results_module
from paraspec.bench.base import Measurement, SystemInfo
from paraspec.bench.plan import Plan, Run, add_bench_flags
from paraspec.bench.results import write_results


def run_of(hand_results: dict, out: Path) -> Run:
    parser = argparse.ArgumentParser()
    add_bench_flags(parser)
    run = Run(
        Plan.from_args(parser.parse_args(["--out", str(out), "--systems", "md-tree,hybrid,hf"]))
    )
    run.systems = {
        name: SystemInfo(name, s["kind"], s["description"], status=s["status"], note=s["note"])
        for name, s in hand_results["systems"].items()
    }
    run.measurements = [Measurement(**m) for m in hand_results["measurements"]]
    run.notes = ["a note"]
    return run


def test_results_json_holds_everything_and_the_report_is_written(hand_results, tmp_path, capsys):
    assert write_results(run_of(hand_results, tmp_path)) == 0
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["schema"] == 1 and saved["notes"] == ["a note"]
    assert saved["measurements"] == hand_results["measurements"]
    assert saved["systems"]["llamacpp"]["status"] == "skipped"
    assert saved["config"]["trie_prefilled"] is False and saved["config"]["out"] == str(tmp_path)
    assert {"cpu", "cpu_features", "kernels", "torch", "git_commit", "forward_cost"} <= set(
        saved["environment"]
    )
    assert (tmp_path / "report.md").is_file() and (tmp_path / "speedup.png").is_file()
    assert "LOSSLESSNESS" not in capsys.readouterr().err


def test_a_lossless_failure_is_printed_and_the_exit_code_is_1(hand_results, tmp_path, capsys):
    next(m for m in hand_results["measurements"] if m["system"] == "md-tree")["token_ids"] = [9]
    assert write_results(run_of(hand_results, tmp_path)) == 1
    assert (
        "paraspec bench: LOSSLESSNESS: md-tree differs from AR on main/grounded/t/0"
        in capsys.readouterr().err
    )


def test_git_commit_names_this_checkout():
    commit = results_module._git_commit()
    here = Path(results_module.__file__).resolve()
    if any((p / ".git").exists() for p in here.parents):
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commit)
    else:
        assert commit is None
