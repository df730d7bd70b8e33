"""bench/dialogue: a task turn by turn, each run's later turn after that run's own answer."""

from __future__ import annotations

import pytest

from paraspec.bench.dialogue import Dialogue
from paraspec.bench.task import Task

Q1, Q2 = "Name a city in France.", "Now say why you chose it."


@pytest.fixture(scope="module")
def tok(bundled_llm_default):
    return bundled_llm_default.tokenizer


def test_each_run_asks_its_next_turn_after_its_own_answer(tok):
    d = Dialogue.of(
        Task(
            "mtbench",
            "writing/1",
            None,
            [{"role": "user", "content": Q1}],
            256,
            "s",
            followups=(Q2,),
        ),
        tok,
        8,
    )
    assert d.turns == 2 and d.first.max_new_tokens == 8 and d.kind == "writing"
    a, b, never = ("md-tree", "sampled", 0), ("md-tree", "sampled", 1), ("hf", "greedy", 0)
    first = d.task(0, a)
    assert first.task_id == "writing/1#1"
    assert first.prompt_ids == d.task(0, b).prompt_ids == d.task(0, never).prompt_ids
    answers = {a: tok.encode("Paris, of course."), b: tok.encode("Lyon.")}
    for run, ids in answers.items():
        d.answered(run, ids)
    for run, ids in answers.items():
        second = d.task(1, run)
        chat = [
            {"role": "user", "content": Q1},
            {"role": "assistant", "content": tok.decode(ids)},
            {"role": "user", "content": Q2},
        ]
        assert second.task_id == "writing/1#2" and second.prompt_ids == tok.encode_chat(chat)
        assert d.chat(run) == chat
    assert d.task(1, never) is None  # no answer to turn 1 (a peer dropped on it): nothing to ask


def test_a_single_turn_task_keeps_its_id(tok):
    d = Dialogue.of(Task("humaneval", "HumanEval/0", "def f():", None, 256, "s"), tok, None)
    run = ("ar", "greedy", 0)
    assert (
        d.turns == 1 and d.task(0, run).task_id == "HumanEval/0" and d.first.max_new_tokens == 256
    )
    d.answered(run, [1, 2])
    assert d.chat(run) is None


def test_follow_ups_need_a_chat():
    with pytest.raises(ValueError, match="follow-up turns need a chat"):
        Task("mtbench", "x/1", "raw prompt", None, 8, "s", followups=("again",))
