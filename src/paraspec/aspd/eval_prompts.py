"""Real prompts for `paraspec aspd eval`: requests nobody shaped for ASPD, with no parallel structure
by construction. Answers are judged against the base model's answer to the same prompt
(evaluate.py); where a prompt has something exact to check, `checks` says what.

Two sources: the bench's chat prompts (chatterbot-corpus openers, bench/chat_tasks.py), taken
evenly across its files, and INSTRUCTIONS below, written for this evaluation in the kinds a chat
model is asked for: lists, how-tos, comparisons, explanations and short factual answers. None of
them appears in the ASPD training data (tests/aspd/test_eval_sets.py checks it).
Check kinds: "items" (at least `min` list lines: "- ", "1. ", "A: "...), "contains_any" (one of
`values`, case-insensitive).
"""

from __future__ import annotations

import re

from .data import Example

# a list line: "- x", "1. x", "a) x", "**Name**: x", "Name: x" (the labels the control writes)
_ITEM = re.compile(
    r"^(?:[-*+•]|\d{1,2}[.)]|[A-Za-z][.):]|\*\*[^*]{1,40}\*\*:?|[A-Z][\w ]{0,30}:)\s*\S"
)

_LIST, _HOWTO, _COMPARE, _EXPLAIN, _SHORT = "list", "howto", "compare", "explain", "short"


def _items(n: int) -> list[dict]:
    return [{"kind": "items", "min": n}]


def _any(*values: str) -> list[dict]:
    return [{"kind": "contains_any", "values": list(values)}]


INSTRUCTIONS: list[tuple[str, str, list[dict]]] = [
    (_LIST, "List three fruits that are red.", _items(3)),
    (_LIST, "Name four animals that live in the ocean.", _items(4)),
    (_LIST, "Give me five tips for sleeping better.", _items(5)),
    (_LIST, "What are three common programming languages?", _items(3)),
    (_LIST, "List the four seasons of the year.", _items(4)),
    (_LIST, "Suggest three names for a pet cat.", _items(3)),
    (_LIST, "What are some good habits for studying? Give three.", _items(3)),
    (_LIST, "Name three musical instruments that use strings.", _items(3)),
    (_LIST, "List three things to pack for a day at the beach.", _items(3)),
    (_LIST, "Give three reasons to learn a second language.", _items(3)),
    (_LIST, "What are the primary colors?", _any("red", "blue", "yellow")),
    (_LIST, "List four vegetables that are green.", _items(4)),
    (_HOWTO, "How do I boil an egg?", []),
    (_HOWTO, "How do you make a cup of tea?", _any("water", "tea")),
    (_HOWTO, "Explain how to plant a tree, step by step.", []),
    (_HOWTO, "How can I improve my handwriting?", []),
    (_HOWTO, "How do I reverse a string in Python?", _any("[::-1]", "reversed", "reverse")),
    (_HOWTO, "How do I create a new folder on my computer?", _any("folder")),
    (_HOWTO, "What are the steps to wash a car?", []),
    (_HOWTO, "How should I prepare for a job interview?", []),
    (_HOWTO, "How do I make a simple paper airplane?", _any("fold")),
    (_HOWTO, "How can I save money each month?", []),
    (_HOWTO, "How do I read a file line by line in Python?", _any("open", "for line")),
    (_COMPARE, "Compare cats and dogs as pets.", _any("cat", "dog")),
    (_COMPARE, "What is the difference between weather and climate?", _any("climate")),
    (_COMPARE, "Compare walking and cycling for getting to work.", _any("walk", "cycl")),
    (_COMPARE, "What are the pros and cons of working from home?", []),
    (_COMPARE, "How is a lake different from a river?", _any("lake", "river")),
    (_COMPARE, "Compare tea and coffee.", _any("tea", "coffee")),
    (
        _COMPARE,
        "What is the difference between a list and a tuple in Python?",
        _any("mutable", "immutable", "change"),
    ),
    (_COMPARE, "Compare reading a book with watching its film.", []),
    (_COMPARE, "What are the advantages and disadvantages of electric cars?", []),
    (_COMPARE, "How do summer and winter differ?", _any("cold", "warm", "hot")),
    (_EXPLAIN, "Explain why the sky is blue.", _any("light", "scatter")),
    (_EXPLAIN, "What is photosynthesis?", _any("light", "plant")),
    (_EXPLAIN, "Explain what a computer virus is.", _any("program", "software", "code")),
    (_EXPLAIN, "Why do we need to drink water?", _any("body")),
    (_EXPLAIN, "What causes rain?", _any("water", "cloud")),
    (_EXPLAIN, "Explain what gravity is to a child.", _any("pull", "fall", "force")),
    (_EXPLAIN, "What does a doctor do?", _any("patient", "health", "sick")),
    (_EXPLAIN, "Why is exercise good for you?", _any("health", "heart", "body")),
    (_EXPLAIN, "What is the internet?", _any("network", "computer")),
    (
        _EXPLAIN,
        "Explain what recycling is and why it matters.",
        _any("waste", "reuse", "environment"),
    ),
    (_EXPLAIN, "What is a recipe?", _any("ingredient", "instruction", "cook")),
    (_EXPLAIN, "Describe how a bicycle works.", _any("pedal", "wheel", "chain")),
    (_SHORT, "What is the capital of France? Answer in one sentence.", _any("Paris")),
    (_SHORT, "How many days are in a leap year?", _any("366")),
    (_SHORT, "What is 12 plus 30?", _any("42")),
    (_SHORT, "Which is larger, an elephant or a mouse?", _any("elephant")),
    (_SHORT, "What color do you get by mixing blue and yellow?", _any("green")),
    (_SHORT, "What is the freezing point of water in Celsius?", _any("0", "zero")),
    (_SHORT, "Who wrote Romeo and Juliet?", _any("Shakespeare")),
    (_SHORT, "What is the chemical symbol for water?", _any("H2O")),
    (_SHORT, "How many minutes are in an hour?", _any("60", "sixty")),
    (_SHORT, "What language is mostly spoken in Brazil?", _any("Portuguese")),
    (_SHORT, "What is the tallest animal in the world?", _any("giraffe")),
]


def instructions() -> list[Example]:
    return [
        Example(f"instr/{i:03d}", fam, prompt, [], checks, source="instructions")
        for i, (fam, prompt, checks) in enumerate(INSTRUCTIONS)
    ]


def chat_prompts(n: int = 20) -> list[Example]:
    """n of the bench's chat prompts, evenly spaced over its list (so across its topic files)."""
    from ..bench.chat_tasks import chat

    tasks = chat()
    step = max(1, len(tasks) // max(1, n))
    picked = tasks[::step][:n]
    return [
        Example(f"chat/{t.task_id}", "chat", t.messages[-1]["content"], [], [], source=t.source)
        for t in picked
    ]


def real_prompts(n_chat: int = 20) -> list[Example]:
    return chat_prompts(n_chat) + instructions()


def sharegpt_heldout(path, n: int) -> list[Example]:
    """The first n of build-data's held-out ShareGPT turns (heldout_sharegpt.jsonl: one seeded turn
    of each chat no part of paraspec trains on), each with its history and its own answer, which
    is the reference (`reference` below)."""
    from .data import read_jsonl

    return read_jsonl(path)[:n]


def mtbench_first_turns(n: int) -> list[Example]:
    """The first turns of n MT-Bench questions, evenly spread over its 8 categories (file order is
    by category); never in training (build-data drops every chat that holds one: sharegpt.py)."""
    from ..datasets import mtbench_questions

    qs = mtbench_questions()
    step = max(1, len(qs) // max(1, n))
    return [
        Example(f"mtbench/{q.question_id}", q.category, q.turns[0], [], [], source="mtbench")
        for q in qs[::step][:n]
    ]


def reference(example: Example) -> str | None:
    """The answer an example is scored against: its own (ShareGPT's assistant turn, as plain text)
    where it has one; None where the base model's answer to it is the reference."""
    return example.plain if example.segments else None


def has_list(text: str) -> bool:
    """Three or more list lines: an answer a block could have written as branches."""
    return sum(bool(_ITEM.match(ln.strip())) for ln in text.splitlines()) >= 3


def check(example: Example, answer: str, branches: int = 0) -> bool | None:
    """True / False by the prompt's checks; None when it has none (judged by overlap only).
    `branches`: the ASPD branches the answer was written in; each is a line the user reads as one
    item of a list (to_plain drops its "T: "), so it counts as one, like a "- " line."""
    if not example.checks:
        return None
    lines = [ln.strip() for ln in answer.splitlines() if ln.strip()]
    low = answer.lower()
    for c in example.checks:
        if c["kind"] == "items":
            if max(branches, sum(bool(_ITEM.match(ln)) for ln in lines)) < c["min"]:
                return False
        elif c["kind"] == "contains_any":
            if not any(v.lower() in low for v in c["values"]):
                return False
        else:
            raise ValueError(f"unknown check kind {c['kind']!r}")
    return True
