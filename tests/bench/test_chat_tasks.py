"""chat: chatterbot-corpus's opening user turns, or language-reference questions without it."""

from __future__ import annotations

import pytest

from paraspec.bench import chat_tasks
from paraspec.bench.tasks import load_task_set

pytestmark = pytest.mark.usefixtures("no_network")


def test_chat_source():
    tasks = load_task_set("chat")
    try:
        import chatterbot_corpus  # noqa: F401
    except ImportError:
        assert all(t.task_id.startswith("reference/") for t in tasks)
    else:
        assert all("chatterbot-corpus" in t.source and "BSD-3-Clause" in t.source for t in tasks)


def test_chat_falls_back_to_reference_questions(monkeypatch):
    monkeypatch.setattr(chat_tasks, "_chat_from_chatterbot", lambda: [])
    tasks = load_task_set("chat")
    assert len(tasks) >= 50 and all(
        t.kind == "reference" and "language reference" in t.source for t in tasks
    )
    assert tasks[0].messages[0]["content"].startswith("Explain ")


@pytest.mark.parametrize(
    "opener,kept",
    [
        ("What is a compiler?", True),
        ("Tell me about the French revolution", True),
        ("Can you write a sorting function?", True),
        ("are you sentient", False),  # a remark to the bot: answered in a line
        ("you are arrogant", False),
        ("hello there", False),  # neither a question nor a request
    ],
)
def test_openers_kept_are_questions_and_requests_not_remarks_to_the_bot(opener, kept):
    assert (
        bool(chat_tasks._ASKS.search(opener)) and not chat_tasks._TO_THE_BOT.search(opener)
    ) == kept
