"""`paraspec bench`: orchestration on a tiny random model (fast), and the real --quick run (slow)."""

import argparse
import json
import subprocess
import sys

import pytest

from paraspec.bench.aggregate import identity_failures, summarize
from paraspec.bench.report import write_report
from paraspec.bench.run import bench_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _args(**kw) -> argparse.Namespace:
    base = dict(
        quick=True,
        out=None,
        tasks=None,
        systems=None,
        n=None,
        max_new_tokens=12,
        model=None,
        dtype="float32",
        quantization=None,
        threads=1,
    )
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture(scope="module")
def quick_run(tiny_model_dir, tmp_path_factory):
    """One --quick style run on the tiny model, shared by the checks below. llama-cpp-python is made
    unimportable (None in sys.modules), so the llamacpp peer takes its real skip path."""
    out = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "llama_cpp", None)
        rc = bench_main(
            _args(
                out=str(out),
                model=str(tiny_model_dir("llama")),
                systems="ar,md-tree,md-chain,la,hybrid,llamacpp",
            )
        )
    return rc, out, json.loads((out / "results.json").read_text())


def test_quick_writes_json_markdown_and_plots(quick_run):
    rc, out, results = quick_run
    assert rc == 0
    report = (out / "report.md").read_text()
    for png in ("speedup.png", "accept_hist.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
        assert f"]({png})" in report
    assert "pre-filled: no" in report
    assert results["config"]["trie_prefilled"] is False
    assert {"cpu", "torch_threads", "torch", "dtype", "git_commit"} <= set(results["environment"])
    # a system that cannot run is listed as skipped, with the reason, never silently dropped
    llamacpp = results["systems"]["llamacpp"]
    assert (llamacpp["status"], llamacpp["kind"]) == ("skipped", "peer")
    assert "llama-cpp-python is not installed" in llamacpp["note"]
    assert (
        "| llamacpp | peer |" in report and "skipped: llama-cpp-python is not installed" in report
    )
    assert all(
        results["systems"][s]["status"] == "ok"
        for s in ("ar", "md-tree", "md-chain", "la", "hybrid")
    )


def test_every_task_is_run_by_every_system_ar_first(quick_run):
    _, _, results = quick_run
    ran = [n for n, s in results["systems"].items() if s["status"] == "ok"]
    main = [m for m in results["measurements"] if m["suite"] == "main"]
    tasks = {(t["task_set"], t["task_id"]) for t in results["tasks"]}
    assert {t[0] for t in tasks} == {"humaneval", "grounded", "chat", "repeated"}
    for key in tasks:
        runs = [m["system"] for m in main if (m["task_set"], m["task_id"]) == key]
        assert runs[0] == "ar" and sorted(runs) == sorted(ran)


def test_the_run_order_keeps_ar_first_and_rotates_the_others():
    from types import SimpleNamespace
    from paraspec.bench.run import _run_order

    systems = [SimpleNamespace(info=SimpleNamespace(name=n)) for n in ("ar", "a", "b", "c")]
    orders = [[s.info.name for s in _run_order(systems, turn)] for turn in range(3)]
    assert orders == [["ar", "a", "b", "c"], ["ar", "b", "c", "a"], ["ar", "c", "a", "b"]]


def test_paraspec_systems_reproduce_ar_greedy_output(quick_run):
    _, _, results = quick_run
    assert identity_failures(results) == []
    rows = [r for r in summarize(results) if r.identical is not None]
    assert rows and all(r.identical[0] == r.identical[1] for r in rows)


def test_report_numbers_come_from_the_raw_measurements(quick_run):
    _, _, results = quick_run
    main = [m for m in results["measurements"] if m["suite"] == "main"]
    for r in summarize(results):
        runs = [m for m in main if m["task_set"] == r.task_set and m["system"] == r.system]
        if r.tasks == 1:
            ar = next(m for m in main if m["task_set"] == r.task_set and m["system"] == "ar")
            assert r.speedup == pytest.approx(
                runs[0]["decode_tokens_per_s"] / ar["decode_tokens_per_s"]
            )
        assert r.forwards_per_token == pytest.approx(
            sum(m["forward_passes"] for m in runs) / sum(m["generated_tokens"] for m in runs)
        )
        if r.system == "ar":
            assert r.accepted_per_step == pytest.approx(
                1.0
            ) and r.forwards_per_token == pytest.approx(1.0)


def test_repeated_set_shows_memory_across_requests(quick_run):
    _, _, results = quick_run
    rep = {
        (m["system"], m["task_id"][-2:]): m
        for m in results["measurements"]
        if m["suite"] == "main" and m["task_set"] == "repeated"
    }
    for system in ("md-tree", "md-chain"):
        assert rep[(system, "#2")]["forward_passes"] < rep[(system, "#1")]["forward_passes"]


def test_a_lossless_failure_is_reported(quick_run, tmp_path):
    _, _, results = quick_run
    bad = json.loads(json.dumps(results))
    m = next(m for m in bad["measurements"] if m["system"] == "md-tree" and m["mode"] == "greedy")
    m["token_ids"] = m["token_ids"][:-1] + [m["token_ids"][-1] + 1]
    assert len(identity_failures(bad)) == 1
    write_report(bad, tmp_path)
    assert "LOSSLESSNESS FAILURE" in (tmp_path / "report.md").read_text()


def test_unknown_system_is_a_one_line_user_error(capsys):
    from paraspec.cli import main

    assert main(["bench", "--quick", "--systems", "ar,nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]


@pytest.mark.slow
def test_real_quick_bench_runs_identical_and_plots(tmp_path):
    """`paraspec bench --quick` on the bundled model: every system's output identical to AR, the
    plots written. Its length is the plan's to bound (QUICK_BUDGET_S: no new task after it), not
    this test's: a wall-clock bound here would fail on a slow core (timings: benchmarks/)."""
    run = subprocess.run(
        [sys.executable, "-m", "paraspec.cli", "bench", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert identity_failures(results) == []
    assert (tmp_path / "speedup.png").read_bytes()[:8] == PNG_MAGIC
