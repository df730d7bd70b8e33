"""`paraspec aspd judge`: the pairwise verdicts (positions swapped) and their summary."""

from __future__ import annotations

import pytest

from paraspec.aspd import pairwise
from paraspec.aspd.pairwise import Pair


def test_summary_counts_letters_and_margins():
    rows = [
        {
            "id": "1",
            "a_first": "A",
            "b_first": "B",
            "outcome": "a",
            "margin": 1.0,
            "outcome_by_margin": "a",
            "same_text": False,
        },
        {
            "id": "2",
            "a_first": "A",
            "b_first": "A",
            "outcome": "tie",
            "margin": -0.5,
            "outcome_by_margin": "b",
            "same_text": False,
        },
        {
            "id": "3",
            "a_first": None,
            "b_first": None,
            "outcome": "tie",
            "margin": 0.0,
            "outcome_by_margin": "tie",
            "same_text": True,
        },
    ]
    s = pairwise.summary(rows)
    assert (s["n"], s["same_text"], s["a"], s["b"], s["tie"]) == (3, 1, 1, 0, 2)
    assert s["a_win_rate"] == pytest.approx(2 / 3)
    assert s["by_margin"] == {"a": 1, "b": 1, "tie": 1}
    assert s["self_agreement"] == 0.5  # one of the two judged pairs agreed across orders
    assert s["first_letter_share"] == 0.75  # 3 of the 4 judgements said "A"


@pytest.mark.slow
def test_swapping_the_variants_mirrors_every_verdict(bundled_llm_default):
    conv = [{"role": "user", "content": "Name a primary colour."}]
    pairs = [
        Pair("p", conv, "Red.", "The sky is made of cheese."),
        Pair("same", conv, "Blue.", "Blue. "),
    ]
    rows = pairwise.verdicts(bundled_llm_default, pairs)
    mirrored = pairwise.verdicts(
        bundled_llm_default, [Pair(p.id, p.messages, p.b, p.a) for p in pairs]
    )
    assert rows[1]["same_text"] and rows[1]["outcome"] == "tie"
    r, m = rows[0], mirrored[0]
    # the same two prompts are judged, in the other order: the margin changes sign, the letters swap
    assert m["margin"] == pytest.approx(-r["margin"], abs=1e-3)
    assert (m["a_first"], m["b_first"]) == (r["b_first"], r["a_first"])
    flip = {"a": "b", "b": "a", "tie": "tie"}
    assert m["outcome"] == flip[r["outcome"]]


def test_pairs_from_report_matches_answers_by_id(tmp_path):
    from kernel_paths import on_ci

    from paraspec import catalog

    if not catalog.is_fetched("mtbench") and not on_ci():
        pytest.skip("mtbench not fetched: run `paraspec fetch mtbench`")
    from paraspec.aspd.eval_prompts import mtbench_first_turns

    one, two = (e.id for e in mtbench_first_turns(2))  # the ids an `aspd eval --mtbench-n 2` writes
    report = {
        "mtbench": {
            "answers": {
                "aspd": [{"id": one, "text": "one"}, {"id": two, "text": "two"}],
                "control": [{"id": two, "text": "TWO"}, {"id": one, "text": "ONE"}],
            }
        }
    }
    sets = pairwise.pairs_from_report(report, "aspd", "control", tmp_path / "none.jsonl")
    pairs = {p.id: p for p in sets["mtbench"]}
    assert (pairs[one].a, pairs[one].b, pairs[two].a, pairs[two].b) == ("one", "ONE", "two", "TWO")
    assert pairs[two].messages[-1]["role"] == "user"
    with pytest.raises(SystemExit, match="--a/--b"):
        pairwise.pairs_from_report(report, "aspd", "nope", tmp_path / "none.jsonl")
