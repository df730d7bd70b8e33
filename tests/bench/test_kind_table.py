"""bench/aggregate.kind_rows and its table in report.md: speedup beside tokens per step per category
and turn, as Spec-Bench reports, then the geometric mean over categories (hand-written results)."""

from __future__ import annotations

import math

import pytest

from paraspec.bench.aggregate import GEOMEAN, kind_rows, summarize
from paraspec.bench.markdown import markdown

# (category, question, turn) -> md-tree's tok/s and decode steps for 4 tokens (AR: 10 tok/s, 3 steps)
CELLS = {
    ("writing", 81, 1): (20.0, 3),
    ("writing", 82, 1): (30.0, 1),
    ("writing", 81, 2): (40.0, 1),
    ("writing", 82, 2): (40.0, 1),
    ("math", 111, 1): (10.0, 3),
    ("math", 111, 2): (20.0, 2),
}


@pytest.fixture
def mt_results(hand_results, measurement):
    ms, tasks = [], []
    for (cat, q, turn), (tps, steps) in CELLS.items():
        tid = f"{cat}/{q}#{turn}"
        tasks.append(dict(task_set="mtbench", task_id=tid, kind=cat, turn=turn))
        ms += [
            measurement("ar", tid, 10.0, [1, 2, 3, 4], 4, 1.0, task_set="mtbench"),
            measurement(
                "md-tree", tid, tps, [1, 2, 3, 4], steps + 1, 3 / steps, task_set="mtbench"
            ),
            measurement("hf", tid, 5.0, [1, 2, 3, 4], None, None, task_set="mtbench"),
        ]
    return {**hand_results, "tasks": tasks, "measurements": hand_results["measurements"] + ms}


def test_per_category_and_turn_the_median_speedup_and_pooled_tokens_per_step(mt_results):
    rows = {(r.kind, r.turn, r.system): r for r in kind_rows(mt_results) if r.task_set == "mtbench"}
    w1 = rows[("writing", 1, "md-tree")]
    assert (w1.tasks, w1.speedup, w1.tps) == (2, 2.5, 25.0)
    assert w1.accepted_per_step == pytest.approx(6 / 4)  # 3 + 3 tokens over 3 + 1 steps, pooled
    assert (
        rows[("writing", 2, "md-tree")].speedup == 4.0
        and rows[("math", 2, "md-tree")].speedup == 2.0
    )
    assert rows[("math", 1, "ar")].accepted_per_step == 1.0
    assert (
        rows[("math", 1, "hf")].accepted_per_step is None and rows[("math", 1, "hf")].speedup == 0.5
    )
    g1 = rows[(GEOMEAN, 1, "md-tree")]
    assert g1.speedup == pytest.approx(math.sqrt(2.5 * 1.0)) and g1.tasks == 3 and g1.tps is None
    assert g1.accepted_per_step == pytest.approx(math.sqrt(1.5 * 1.0))
    assert [(r.kind, r.turn) for r in kind_rows(mt_results) if r.system == "ar"] == [
        ("writing", 1),
        ("writing", 2),
        ("math", 1),
        ("math", 2),
        (GEOMEAN, 1),
        (GEOMEAN, 2),
    ]


def test_a_set_of_one_kind_and_turn_has_no_table_and_old_files_read_kinds_from_ids(mt_results):
    # ids "t/0", "t/1": one kind
    assert not [r for r in kind_rows(mt_results) if r.task_set == "grounded"]
    legacy = {**mt_results, "tasks": []}
    kinds = {(r.kind, r.turn) for r in kind_rows(legacy) if r.task_set == "mtbench"}
    assert kinds == {("writing", None), ("math", None), (GEOMEAN, None)}


def test_the_report_shows_the_table_per_category_and_turn(mt_results):
    md = markdown(mt_results, summarize(mt_results), {})
    assert (
        "#### mtbench per kind (greedy): speedup vs AR" in md and "#### grounded per kind" not in md
    )
    assert "| kind | turn | tasks | AR tok/s | md-tree | hf |" in md
    assert "| writing | 1 | 2 | 10.0 | 2.50x / 1.50 | 0.50x / - |" in md
    assert f"| **{GEOMEAN}** | 2 | 3 |  | 2.83x / 2.12 | 0.50x / - |" in md
