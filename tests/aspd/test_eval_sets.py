"""The evaluation's sets and statistics: real prompts that no training item contains, checks that can
fail, bootstrap intervals that hold their point figure, ROUGE-L and the loop detector."""

import pytest

from paraspec.aspd import eval_prompts, synth
from paraspec.aspd.eval_stats import bootstrap, degenerate, mean_ci, rouge_l, speedup_ci


def test_real_prompts_are_not_in_the_training_data():
    real = eval_prompts.real_prompts()
    assert len(real) >= 70 and len(eval_prompts.INSTRUCTIONS) >= 50
    assert len({e.prompt for e in real}) == len(real)
    assert {e.family for e in real} >= {"chat", "list", "howto", "compare", "explain", "short"}
    train_text = "\n".join(e.prompt + e.aspd for e in synth.generate(1200, 0))
    assert not [e.prompt for e in real if e.prompt in train_text]


def test_mtbench_first_turns_spread_over_every_category():
    from kernel_paths import on_ci

    from paraspec import catalog

    if not catalog.is_fetched("mtbench") and not on_ci():
        pytest.skip("mtbench not fetched: run `paraspec fetch mtbench`")
    exs = eval_prompts.mtbench_first_turns(16)
    assert (
        len(exs) == 16 and len({e.family for e in exs}) == 8 and len({e.prompt for e in exs}) == 16
    )
    # the base model's answer is the reference
    assert all(eval_prompts.reference(e) is None for e in exs)


def test_has_list_counts_list_lines():
    assert eval_prompts.has_list("Sure:\n1. a\n2. b\n3. c") and eval_prompts.has_list(
        "- a\n- b\n  - c"
    )
    assert not eval_prompts.has_list("1. a\n2. b") and not eval_prompts.has_list(
        "Plain prose.\nMore prose."
    )


def test_checks_accept_and_reject():
    lst = next(
        e for e in eval_prompts.instructions() if e.checks and e.checks[0]["kind"] == "items"
    )
    n = lst.checks[0]["min"]
    assert eval_prompts.check(lst, "Sure:\n" + "\n".join(f"{i + 1}. thing" for i in range(n)))
    assert eval_prompts.check(lst, "\n".join(f"- thing {i}" for i in range(n)))
    assert not eval_prompts.check(lst, "Here is one: 1. thing")
    # ASPD's branches, one line each
    assert eval_prompts.check(lst, "\n".join(["Apples"] * n), branches=n)
    short = next(e for e in eval_prompts.instructions() if "Romeo" in e.prompt)
    assert eval_prompts.check(short, "It was William Shakespeare.") and not eval_prompts.check(
        short, "Dickens."
    )
    assert eval_prompts.check(eval_prompts.chat_prompts(1)[0], "anything") is None


def test_bootstrap_interval_holds_the_point_and_narrows_with_n():
    small = mean_ci([0.0, 1.0] * 5)
    big = mean_ci([0.0, 1.0] * 200)
    assert small["ci90"][0] <= small["mean"] <= small["ci90"][1]
    assert big["ci90"][1] - big["ci90"][0] < small["ci90"][1] - small["ci90"][0]
    assert bootstrap(lambda idx: 3.0, 5) == [3.0, 3.0]
    s = speedup_ci([2.0, 2.0], [10, 10], [1.0, 1.0], [10, 10])  # half the seconds per token
    assert s["ratio"] == 2.0 and s["ci90"] == [2.0, 2.0]
    s = speedup_ci([2.0], [10], [1.0], [5])  # half the time, half the tokens
    assert s["ratio"] == 1.0


def test_rouge_l_and_loops():
    assert rouge_l("the cat sat", "the cat sat") == 1.0
    assert rouge_l("dogs run", "the cat sat") == 0.0
    assert rouge_l("the cat", "the cat sat on the mat") == pytest.approx(
        2 * 1 * (2 / 6) / (1 + 2 / 6)
    )
    assert degenerate("I like it. " * 6) and not degenerate(
        "One sentence that never repeats its words at all."
    )
