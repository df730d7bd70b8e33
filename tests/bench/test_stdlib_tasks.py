"""grounded and repeated: the stdlib's own source and language reference, quoted verbatim."""

from __future__ import annotations

import re

import pytest

from paraspec.bench import stdlib_tasks
from paraspec.bench.tasks import load_task_set

pytestmark = pytest.mark.usefixtures("no_network")


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
            lines = [
                ln for ln in body.splitlines() if ln.strip() and not ln.startswith("Question: ")
            ]
            assert lines[0] in topics[topic] and lines[-1] in topics[topic]
        else:
            mod = t.source.split("module ", 1)[1].split(" ", 1)[0]
            src = stdlib_tasks.STDLIB.joinpath(*mod.split(".")).with_suffix(".py")
            src = src if src.is_file() else src.with_suffix("") / "__init__.py"
            text = src.read_text(encoding="utf-8")
            code = re.search(r"```python\n(.*)\n```", t.text, re.S).group(1)
            assert all(ln.strip() in text for ln in code.splitlines())


def test_repeated_asks_each_request_twice_in_order():
    tasks = load_task_set("repeated")
    half = len(tasks) // 2
    first, second = tasks[:half], tasks[half:]
    assert all(t.task_id.endswith("#1") for t in first) and all(
        t.task_id.endswith("#2") for t in second
    )
    assert [t.messages for t in first] == [t.messages for t in second]
    assert len({t.source for t in tasks}) == 1  # one module: the same kind of request throughout
    few = load_task_set("repeated", n=5, seed=0)
    stems = [t.task_id[:-2] for t in few]
    assert stems == stems[:3] + stems[:2]


def test_tasks_are_handed_out_as_copies():
    a = load_task_set("grounded", n=1)
    a[0].messages[0]["content"] = "changed"
    assert load_task_set("grounded", n=1)[0].messages[0]["content"] != "changed"
