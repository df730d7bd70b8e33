"""bench/workload_tasks: MT-Bench and ShareGPT as task sets, the ShareGPT cut rules, the warm corpus's
separation from both, and a data file that is not fetched."""

from __future__ import annotations

import collections

import pytest

from paraspec import datasets
from paraspec.bench import workload_tasks as wt
from paraspec.bench.task import MAX_PROMPT_CHARS
from paraspec.bench.tasks import load_task_set, quick_tasks
from paraspec.errors import ModelLoadError


def conv(*turns: tuple[str, str], cid: str = "abc_0") -> datasets.Conversation:
    return datasets.Conversation(cid, tuple({"role": r, "content": c} for r, c in turns))


# ------------------------------------------------------------------------------- the cut rules (no data)


def test_a_cut_answers_a_later_user_turn_after_whole_exchanges():
    c = conv(
        ("assistant", "(the end of an earlier piece)"),
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2 " * 40),
    )
    t = wt.cut(c, "eval", 1, "src")
    assert t.task_set == "sharegpt" and t.task_id == "prose/abc_0/u2" and t.kind == "prose"
    assert t.messages == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    # from the data's own answer (120 chars)
    assert 64 <= t.max_new_tokens <= wt.SHAREGPT_MAX_NEW_TOKENS
    # no earlier exchange
    assert wt.cut(conv(("user", "q1"), ("assistant", "a1")), "eval", 1, "src") is None
    # the warm corpus: first turns
    first = wt.cut(conv(("user", "q1"), ("assistant", "a1")), "warm", 0, "src")
    assert (
        first.messages == [{"role": "user", "content": "q1"}] and first.task_set == "sharegpt-warm"
    )


def test_oldest_exchanges_are_dropped_whole_to_fit_the_budget():
    big = "x" * (MAX_PROMPT_CHARS // 2)
    c = conv(
        ("user", big),
        ("assistant", big),
        ("user", "q2"),
        ("assistant", "a2"),
        ("user", "q3 ```py```"),
        ("assistant", "a3"),
    )
    t = wt.cut(c, "eval", 1, "src")
    assert [m["content"] for m in t.messages] == ["q2", "a2", "q3 ```py```"] and t.kind == "code"
    assert len(t.text) <= MAX_PROMPT_CHARS


@pytest.mark.parametrize(
    "turns",
    [
        (
            ("user", "q1"),
            ("user", "q1 again"),
            ("assistant", "a"),
            ("user", "q2"),
            ("assistant", "a2"),
        ),  # roles
        (
            ("system", "be nice"),
            ("user", "q1"),
            ("assistant", "a1"),
            ("user", "q2"),
            ("assistant", "a2"),
        ),
        (("user", "q1"), ("assistant", " "), ("user", "q2"), ("assistant", "a2")),  # empty
        (
            ("user", "이것은 무엇입니까"),
            ("assistant", "그것은 책입니다"),
            ("user", "q2"),
            ("assistant", "a2"),
        ),  # Korean
        (
            ("user", "q1"),
            ("assistant", "a1"),
            ("user", "q" * (wt.QUESTION_CHARS + 1)),
            ("assistant", "a2"),
        ),  # huge
        (
            ("user", "x" * MAX_PROMPT_CHARS),
            ("assistant", "a1"),
            ("user", "q2"),
            ("assistant", "a2"),
        ),  # no room
    ],
)
def test_conversations_the_rules_skip(turns):
    assert wt.cut(conv(*turns), "eval", 1, "src") is None


# ------------------------------------------------------------------------------------ the fetched data


def test_mtbench_is_all_80_questions_with_both_turns(mtbench_data, no_network):
    tasks = load_task_set("mtbench")
    assert len(tasks) == 80 and len({t.task_id for t in tasks}) == 80
    assert collections.Counter(t.kind for t in tasks) == {
        c: 10 for c in datasets.MTBENCH_CATEGORIES
    }
    for t in tasks:
        assert (
            t.task_id == f"{t.kind}/{t.task_id.split('/')[1]}"
            and t.turns == 2
            and t.followups[0].strip()
        )
        assert [m["role"] for m in t.messages] == [
            "user"
        ] and t.max_new_tokens == wt.MTBENCH_MAX_NEW_TOKENS
    assert {t.kind for t in load_task_set("mtbench", 8, seed=1)} == set(datasets.MTBENCH_CATEGORIES)
    (quick,) = quick_tasks("mtbench", 1)
    assert quick.turns == 2


def test_sharegpt_is_a_seeded_sample_of_eval_chats_with_history(sharegpt_data, no_network):
    a = load_task_set("sharegpt", 12, seed=5)
    assert a == load_task_set("sharegpt", 12, seed=5) == load_task_set("sharegpt", 13, seed=5)[:12]
    assert [t.task_id for t in a] != [t.task_id for t in load_task_set("sharegpt", 12, seed=6)]
    everything = load_task_set("sharegpt")
    chats = [t.task_id.split("/")[1].rsplit("_", 1)[0] for t in everything]
    assert len(everything) >= 100 and len(set(chats)) == len(chats)  # one cut per chat
    assert all(datasets.split_of(c) == "eval" for c in chats)
    for t in everything:
        roles = [m["role"] for m in t.messages]
        assert len(roles) >= 3 and roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
        assert all(m["content"].strip() for m in t.messages) and len(t.text) <= MAX_PROMPT_CHARS
        assert len(t.messages[-1]["content"]) <= wt.QUESTION_CHARS
        assert t.max_new_tokens <= wt.SHAREGPT_MAX_NEW_TOKENS
        assert t.kind == ("code" if any("```" in m["content"] for m in t.messages) else "prose")
    assert {t.kind for t in everything} == {"code", "prose"}


def test_the_warm_corpus_shares_no_chat_with_the_eval_sample_nor_mtbench(
    sharegpt_data, mtbench_data
):
    from paraspec.bench.warm_memory import warm_prompts

    chat = lambda t: t.task_id.split("/")[1].rsplit("_", 1)[0]  # noqa: E731
    # (any MT-Bench question in it is already left out)
    warm = warm_prompts(len(wt.warm_corpus()) - 5)
    assert not {chat(t) for t in warm} & {chat(t) for t in load_task_set("sharegpt")}
    questions = {
        " ".join(q.split()).casefold() for m in datasets.mtbench_questions() for q in m.turns
    }
    assert not any(
        " ".join(m["content"].split()).casefold() in questions for t in warm for m in t.messages
    )


def test_a_data_set_not_fetched_is_a_one_line_error_naming_the_fix(tmp_path, monkeypatch, capsys):
    from paraspec.cli import main

    monkeypatch.setenv("PARASPEC_CACHE", str(tmp_path))
    with pytest.raises(ModelLoadError, match=r"run `make models` or `paraspec fetch sharegpt`"):
        datasets.sharegpt_split.__wrapped__("eval")  # (the cached split is the fetched file's)
    # before any load
    assert main(["bench", "--tasks", "chat,mtbench", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "mtbench is not fetched" in err[0]
        and "`paraspec fetch mtbench`" in err[0]
    )
