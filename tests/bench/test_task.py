"""The Task type and the prompt helpers every task set builds with."""

from __future__ import annotations

import pytest

from paraspec.bench.task import Task, answer_cap, copy_task


def test_a_task_has_a_prompt_or_messages_not_both():
    with pytest.raises(ValueError):
        Task("chat", "x/1", "a prompt", [{"role": "user", "content": "and messages"}], 64, "here")
    with pytest.raises(ValueError):
        Task("chat", "x/1", None, None, 64, "here")


def test_kind_is_the_id_before_the_slash_and_text_joins_the_turns():
    t = Task(
        "grounded",
        "edit-rename/csv.reader",
        None,
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        64,
        "here",
    )
    assert t.kind == "edit-rename" and t.text == "a\nb"
    assert Task("humaneval", "HumanEval/0", "def f():", None, 256, "here").text == "def f():"


def test_answer_cap_leaves_room_and_stays_in_bounds():
    assert answer_cap(0) == 64 and answer_cap(10**6) == 384
    caps = [answer_cap(n) for n in range(0, 2000, 50)]
    assert caps == sorted(caps)
    assert answer_cap(700) > 700 / 3.5  # more than the answer's own tokens: it ends by itself


def test_copy_task_does_not_share_messages():
    t = Task("chat", "x/1", None, [{"role": "user", "content": "hi"}], 64, "here")
    c = copy_task(t)
    c.messages[0]["content"] = "changed"
    assert c == Task("chat", "x/1", None, [{"role": "user", "content": "changed"}], 64, "here")
    assert t.messages[0]["content"] == "hi"
