"""bench/plan: the flags of `paraspec bench` read into a Plan, with --quick's defaults and one-line errors."""

from __future__ import annotations

import argparse

import pytest

from paraspec.bench.plan import (
    QUICK_BUDGET_S,
    QUICK_MAX_NEW_TOKENS,
    QUICK_SYSTEMS,
    Plan,
    Run,
    add_bench_flags,
)
from paraspec.bench.systems import ALL_SYSTEMS
from paraspec.bench.tasks import TASK_SETS
from paraspec.errors import ConfigError


def plan(*argv: str) -> Plan:
    parser = argparse.ArgumentParser()
    add_bench_flags(parser)
    return Plan.from_args(parser.parse_args(list(argv)))


def test_a_full_run_by_default():
    p = plan()
    assert p.task_sets == list(TASK_SETS) and p.systems == list(ALL_SYSTEMS)
    assert (p.repeats, p.modes, p.max_new_tokens, p.budget_s) == (
        3,
        ["greedy", "sampled"],
        None,
        None,
    )
    assert p.ttft_probe and not p.sweep and not p.serving and str(p.out) == "bench-out"
    assert (p.engine.model, p.engine.dtype, p.engine.quantization) == ("default", "auto", "auto")


def test_quick_is_a_short_greedy_smoke_run():
    p = plan("--quick")
    assert p.systems == list(QUICK_SYSTEMS) and p.modes == ["greedy"] and p.repeats == 1
    assert (
        p.max_new_tokens == QUICK_MAX_NEW_TOKENS
        and p.budget_s == QUICK_BUDGET_S
        and not p.ttft_probe
    )


def test_ar_always_runs_and_runs_first():
    assert plan("--systems", "la, md-tree").systems == ["ar", "la", "md-tree"]
    assert plan("--systems", "la,ar,hf").systems == ["ar", "la", "hf"]


def test_flags_reach_the_plan():
    p = plan(
        "--tasks",
        "chat,grounded",
        "--n",
        "3",
        "--repeats",
        "2",
        "--modes",
        "sampled",
        "--sweep",
        "--no-ttft-probe",
        "--memory",
        "m.trie",
        "--threads",
        "2",
        "--max-new-tokens",
        "64",
    )
    assert (p.task_sets, p.n, p.repeats, p.modes) == (["chat", "grounded"], 3, 2, ["sampled"])
    assert p.sweep and not p.ttft_probe
    assert (p.memory_file, p.engine.num_threads, p.max_new_tokens) == ("m.trie", 2, 64)


@pytest.mark.parametrize(
    "argv,words",
    [
        (
            ["--tasks", "humaneval,nope"],
            "unknown task set 'nope'; choose from humaneval, grounded, chat, repeated",
        ),
        (["--systems", "ar,aspd"], "unknown bench system 'aspd'; choose from ar,"),
        (
            ["--modes", "greedy,fast"],
            "--modes takes greedy and/or sampled (comma-separated), got greedy,fast",
        ),
    ],
)
def test_bad_values_are_one_line_errors(argv, words):
    with pytest.raises(ConfigError) as e:
        plan(*argv)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_quick_time_budget():
    run = Run(plan("--quick"))
    assert not run.over_budget()
    run.started -= QUICK_BUDGET_S + 1
    assert run.over_budget() and not Run(plan()).over_budget()


def test_the_workload_sets_are_asked_for_by_name_not_run_by_default():
    assert plan("--tasks", "mtbench,sharegpt").task_sets == ["mtbench", "sharegpt"]
    assert "mtbench" not in plan().task_sets  # a default run needs no fetched data


def test_warm_systems_take_the_warm_memory_built_for_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("PARASPEC_CACHE", str(tmp_path))
    with pytest.raises(
        ConfigError,
        match=r"none was built for m; run `paraspec bench --build-warm-memory 64 "
        r"--model m` \(or pass --warm-memory FILE\)",
    ):
        plan("--model", "m", "--systems", "hybrid+warm")
    (tmp_path / "warm").mkdir()
    for n in (8, 64, 16):
        (tmp_path / "warm" / f"m-{n}.trie").write_bytes(b"")
    p = plan("--model", "m", "--systems", "hybrid,hybrid+warm,md-tree-dyn+warm")
    assert p.systems == ["ar", "hybrid", "hybrid+warm", "md-tree-dyn+warm"]
    assert p.warm_memory_file == str(tmp_path / "warm" / "m-64.trie")  # the most answers
    assert plan("--model", "m", "--systems", "hybrid").warm_memory_file is None
    assert plan(
        "--systems",
        "hybrid+warm",
        "--warm-memory",
        str(tmp_path / "warm" / "m-8.trie"),
        "--memory",
        "x.trie",
    ).warm_memory_file.endswith("m-8.trie")
    assert plan("--build-warm-memory", "32", "--model", "m").build_warm_memory == 32


@pytest.mark.parametrize(
    "argv,words",
    [
        (
            ["--systems", "la+warm"],
            "la+warm: la keeps no memory to warm; '+warm' goes on memory_decoding and hybrid",
        ),
        (["--systems", "nope+warm"], "unknown bench system 'nope+warm'"),
        (
            ["--systems", "hybrid+warm", "--warm-memory", "/no/such.trie"],
            "--warm-memory /no/such.trie does not exist; build it with `paraspec bench --build-warm-memory 64",
        ),
    ],
)
def test_bad_warm_systems_are_one_line_errors(argv, words):
    with pytest.raises(ConfigError) as e:
        plan(*argv)
    assert words in str(e.value) and "\n" not in str(e.value)
