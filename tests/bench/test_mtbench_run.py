"""`paraspec bench --tasks mtbench` on the bundled model, in this process: both turns, each system's
turn 2 after its own turn 1, greedy = AR per turn, the per-kind table; and a warm memory built from
the model's own answers, run beside the cold systems as "hybrid+warm"."""

from __future__ import annotations

import argparse
import json

import pytest

from paraspec.bench.aggregate import identity_failures, kind_rows
from paraspec.bench.run import bench_main
from paraspec.bench.tasks import load_task_set

SYSTEMS = ("ar", "md-tree", "hybrid+warm")
PINNED_COST = (
    '{"1": 1, "4": 1.3, "8": 1.7, "16": 2.6}'  # skips the start-up probe: drafts are not timed here
)


def _args(**kw) -> argparse.Namespace:
    base = dict(
        quick=False,
        out=None,
        tasks="mtbench",
        systems=",".join(SYSTEMS),
        n=2,
        max_new_tokens=8,
        repeats=1,
        modes="greedy",
        no_ttft_probe=True,
        model=None,
        threads=None,
    )
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture(scope="module")
def run(tmp_path_factory, mtbench_data, sharegpt_data):
    tmp = tmp_path_factory.mktemp("mtbench")
    warm = tmp / "warm.trie"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PARASPEC_FORWARD_COST", PINNED_COST)
        assert bench_main(_args(build_warm_memory=2, warm_memory=str(warm))) == 0
        assert bench_main(_args(out=str(tmp / "out"), warm_memory=str(warm))) == 0
    return (
        tmp,
        json.loads((tmp / "out" / "results.json").read_text()),
        (tmp / "out" / "report.md").read_text(),
    )


def test_every_question_is_measured_turn_by_turn_ar_first(run):
    _, results, _ = run
    ids = [t.task_id for t in load_task_set("mtbench", 2)]
    assert [(t["task_id"], t["kind"], t["turn"]) for t in results["tasks"]] == [
        (f"{i}#{k}", i.split("/")[0], k) for i in ids for k in (1, 2)
    ]
    ran = [(m["task_id"], m["system"]) for m in results["measurements"] if m["suite"] == "main"]
    assert [tid for tid, _ in ran] == [f"{i}#{k}" for i in ids for k in (1, 2) for _ in SYSTEMS]
    assert all(ran[j][1] == "ar" for j in range(0, len(ran), len(SYSTEMS)))  # AR opens every turn


def test_turn_two_follows_each_systems_own_first_answer(run, bundled_llm_default):
    _, results, _ = run
    tok = bundled_llm_default.tokenizer  # the bundled model's, as the bench's
    main = {(m["task_id"], m["system"]): m for m in results["measurements"] if m["suite"] == "main"}
    for t in load_task_set("mtbench", 2):
        for s in SYSTEMS:
            first = main[(f"{t.task_id}#1", s)]
            chat = [
                *t.messages,
                {"role": "assistant", "content": tok.decode(first["token_ids"])},
                {"role": "user", "content": t.followups[0]},
            ]
            assert first["prompt_tokens"] == len(tok.encode_chat(t.messages))
            assert main[(f"{t.task_id}#2", s)]["prompt_tokens"] == len(tok.encode_chat(chat))


def test_greedy_paraspec_systems_equal_ar_on_both_turns(run):
    _, results, _ = run
    assert identity_failures(results) == []
    main = [m for m in results["measurements"] if m["suite"] == "main"]
    for tid in {m["task_id"] for m in main}:
        assert len({tuple(m["token_ids"]) for m in main if m["task_id"] == tid}) == 1


def test_the_report_has_a_table_per_category_and_turn_and_labels_cold_and_warm(run):
    _, results, report = run
    rows = kind_rows(results)
    kinds = [t.kind for t in load_task_set("mtbench", 2)]
    assert {(r.kind, r.turn) for r in rows} == {(k, n) for k in [*kinds, "geomean"] for n in (1, 2)}
    assert "#### mtbench per kind (greedy)" in report and f"| {kinds[0]} | 2 | 1 |" in report
    assert "| md-tree | paraspec |" in report and "| cold |" in report
    assert "| hybrid+warm | paraspec |" in report and "| **warm** (`warm.trie`) |" in report
    assert "**Cold and warm.**" in report and "2 ShareGPT prompts of the warm split" in report


def test_the_warm_memory_holds_the_models_answers_and_says_where_they_came_from(run):
    from paraspec.decoding.memory.memory_file import read_memory_file

    tmp, results, _ = run
    memory = read_memory_file(tmp / "warm.trie")
    assert len(memory.outputs) > 0 and memory.count.sum() > 0
    info = results["config"]["warm_memory"]
    assert (info["n"], info["split"], info["max_new_tokens"], len(info["chats"])) == (
        2,
        "warm",
        8,
        2,
    )
    assert results["config"]["warm_memory_file"] == str(tmp / "warm.trie")
    assert "memory starts warm from" in results["systems"]["hybrid+warm"]["description"]
