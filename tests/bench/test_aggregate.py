"""bench/aggregate: the report's numbers from hand-written measurements (see conftest.hand_results)."""

from __future__ import annotations

import dataclasses

import pytest

from paraspec.bench.aggregate import (
    best_sweep,
    bootstrap_median,
    claims,
    identity_failures,
    summarize,
    ttft_ratios,
)


def rows_by_system(results: dict) -> dict:
    return {r.system: r for r in summarize(results) if r.suite == "main"}


def test_speedups_are_per_task_ratios_to_ar_then_the_median_over_the_set(hand_results):
    rows = rows_by_system(hand_results)
    md = rows["md-tree"]
    assert (md.speedup, md.speedup_min, md.speedup_max) == (2.5, 2.0, 3.0) and md.tasks == 2
    assert md.tps == 25.0
    assert rows["ar"].speedup == 1.0 and rows["hf"].speedup == pytest.approx(1.0)


def test_tokens_per_step_and_forwards_per_token_are_pooled_over_runs(hand_results):
    rows = rows_by_system(hand_results)
    # md-tree: 2 decode steps emitting 3 tokens, then 1 step emitting 3: 6 tokens / 3 steps
    assert rows["md-tree"].accepted_per_step == pytest.approx(2.0)
    assert rows["md-tree"].forwards_per_token == pytest.approx((3 + 2) / 8)
    assert (
        rows["ar"].accepted_per_step == pytest.approx(1.0) and rows["ar"].forwards_per_token == 1.0
    )
    # not counted
    assert rows["hf"].accepted_per_step is None and rows["hf"].forwards_per_token is None
    assert rows["md-tree"].peak_rss_mb == 2.0 and rows["md-tree"].kv_mb == 1.0


def test_greedy_equality_for_paraspec_prefix_agreement_for_peers(hand_results):
    rows = rows_by_system(hand_results)
    assert rows["md-tree"].identical == (2, 2) and rows["md-tree"].agreement is None
    assert rows["hf"].identical is None and rows["hf"].agreement == pytest.approx(0.5)
    assert rows["ar"].identical is None


def test_rows_follow_the_order_of_the_systems(hand_results):
    assert [r.system for r in summarize(hand_results) if r.suite == "main"] == [
        "ar",
        "md-tree",
        "hybrid",
        "hf",
    ]


def test_identity_failures_name_the_system_and_task(hand_results):
    assert identity_failures(hand_results) == []
    m = next(
        m for m in hand_results["measurements"] if (m["system"], m["task_id"]) == ("md-tree", "t/1")
    )
    m["token_ids"] = [1, 2, 3, 5]
    assert identity_failures(hand_results) == ["md-tree differs from AR on main/grounded/t/1"]
    peer = next(m for m in hand_results["measurements"] if m["system"] == "hf")
    peer["token_ids"] = [7]  # peers differ by numerics: never a failure
    assert len(identity_failures(hand_results)) == 1


def test_ttft_ratio_to_ar_on_the_probe(hand_results):
    assert ttft_ratios(hand_results) == {"md-tree": pytest.approx(1.02)}


def test_bootstrap_interval_of_the_median():
    assert bootstrap_median([1.0] * 5) == (1.0, 1.0)
    lo, hi = bootstrap_median([1.0, 2.0, 3.0, 4.0, 5.0])
    assert 1.0 <= lo <= 3.0 <= hi <= 5.0
    assert bootstrap_median([1.0, 2.0, 3.0, 4.0, 5.0]) == (lo, hi)  # seeded: the same every time


def test_claims_give_verdicts_against_the_targets(hand_results):
    verdicts = {
        (claim, system): (measured, verdict)
        for claim, system, measured, verdict in claims(hand_results, summarize(hand_results))
    }
    assert verdicts[("memory_decoding >= 2.5x on grounded (median)", "md-tree")] == (
        "2.50x",
        "pass",
    )
    assert verdicts[("memory_decoding >= 1.3x on HumanEval (median)", "md-tree")] == (
        "not measured",
        "-",
    )
    assert verdicts[("memory_decoding >= 0.95x on every task", "md-tree")] == ("2.00x", "pass")
    assert verdicts[("trie insertion adds <= 5 % to TTFT (2k-token prompt)", "md-tree")] == (
        "+2.0 %",
        "pass",
    )
    # hybrid vs md-tree per task: 19/20 and 31/30, median 0.99; the interval reaches above 1
    (hybrid,) = [v for (claim, s), v in verdicts.items() if s == "hybrid"]
    assert hybrid[0].startswith("0.992x") and hybrid[1] == "level, within noise"


def test_a_set_where_a_target_is_missed_fails(hand_results):
    for m in hand_results["measurements"]:
        if m["system"] == "md-tree" and m["suite"] == "main":
            m["decode_tokens_per_s"] = 9.0
    verdicts = {(c, s): v for c, s, _, v in claims(hand_results, summarize(hand_results))}
    assert verdicts[("memory_decoding >= 2.5x on grounded (median)", "md-tree")] == "FAIL"
    assert verdicts[("memory_decoding >= 0.95x on every task", "md-tree")] == "FAIL"


def test_best_sweep_point_by_median_speedup(hand_results):
    row = rows_by_system(hand_results)["md-tree"]
    sweep = [
        dataclasses.replace(row, suite="sweep", system=name, speedup=sp)
        for name, sp in (("md-tree-L4", 1.5), ("md-tree-L16", 2.5), ("la-N4W5G5", 3.0))
    ]
    assert best_sweep(sweep, "md-") == ("md-tree-L16", 2.5)
    assert best_sweep(sweep, "la-") == ("la-N4W5G5", 3.0)
    assert best_sweep(sweep, "hybrid") is None
