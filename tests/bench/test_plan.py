"""bench/plan: the flags of `paraspec bench` read into a Plan, with --quick's defaults and one-line errors."""
from __future__ import annotations

import argparse

import pytest

from paraspec.bench.plan import QUICK_BUDGET_S, QUICK_MAX_NEW_TOKENS, QUICK_SYSTEMS, Plan, Run, add_bench_flags
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
    assert (p.repeats, p.modes, p.max_new_tokens, p.budget_s) == (3, ["greedy", "sampled"], None, None)
    assert p.ttft_probe and not p.sweep and not p.serving and str(p.out) == "bench-out"
    assert (p.model, p.dtype, p.quantization) == ("default", "auto", "auto")


def test_quick_is_a_short_greedy_smoke_run():
    p = plan("--quick")
    assert p.systems == list(QUICK_SYSTEMS) and p.modes == ["greedy"] and p.repeats == 1
    assert p.max_new_tokens == QUICK_MAX_NEW_TOKENS and p.budget_s == QUICK_BUDGET_S and not p.ttft_probe


def test_ar_always_runs_and_runs_first():
    assert plan("--systems", "la, md-tree").systems == ["ar", "la", "md-tree"]
    assert plan("--systems", "la,ar,hf").systems == ["ar", "la", "hf"]


def test_flags_reach_the_plan():
    p = plan("--tasks", "chat,grounded", "--n", "3", "--repeats", "2", "--modes", "sampled", "--sweep",
             "--no-ttft-probe", "--memory", "m.trie", "--threads", "2", "--max-new-tokens", "64")
    assert (p.task_sets, p.n, p.repeats, p.modes) == (["chat", "grounded"], 3, 2, ["sampled"])
    assert p.sweep and not p.ttft_probe and (p.memory_file, p.threads, p.max_new_tokens) == ("m.trie", 2, 64)


@pytest.mark.parametrize("argv,words", [
    (["--tasks", "humaneval,nope"], "unknown task set 'nope'; choose from humaneval, grounded, chat, repeated"),
    (["--systems", "ar,aspd"], "unknown bench system 'aspd'; choose from ar,"),
    (["--modes", "greedy,fast"], "--modes takes greedy and/or sampled (comma-separated), got greedy,fast"),
])
def test_bad_values_are_one_line_errors(argv, words):
    with pytest.raises(ConfigError) as e:
        plan(*argv)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_quick_time_budget():
    run = Run(plan("--quick"))
    assert not run.over_budget()
    run.started -= QUICK_BUDGET_S + 1
    assert run.over_budget() and not Run(plan()).over_budget()
