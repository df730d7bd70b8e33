"""The field's own chat workloads as bench task sets, read from the files `paraspec fetch` caches
(datasets.py; a missing file is a one-line error saying how to fetch it).

- ``mtbench``: all 80 MT-Bench questions (8 categories x 10), both turns; the kind is the category
  (task ids "writing/81"). The second turn is asked after the answering system's own first answer
  (dialogue.py), as MT-Bench does.
- ``sharegpt``: real multi-turn conversations of ShareGPT's eval split (datasets.py), each cut at
  one of its later user turns: the conversation's own earlier turns are the history and the model
  answers that turn. The rules (the same on every machine; no randomness but a hash of the id):
    * roles alternate user / assistant from the first user turn (a piece of a longer chat that
      opens with the assistant's turn loses that turn); a system turn or two turns of one role in
      a row: skipped; so is a conversation with an empty turn, or with under 90 % ASCII
      characters (other languages: not what the bench's English prompts measure);
    * a cut is a user turn after at least one whole exchange, answered in the data (that answer's
      length sets the cap, as for the other sets), of at most QUESTION_CHARS characters;
    * its history is the whole exchanges just before it, newest first, while question and history
      fit MAX_PROMPT_CHARS; oldest exchanges are dropped, never cut; a cut where not even the
      last exchange fits is no cut;
    * of a conversation's cuts one is picked by a hash of its id, and of the pieces of one chat
      (ids "<chat>_<piece>") one piece likewise: the set samples chats, not stretches of one.
  Kinds: ``code`` where the prompt holds a code fence, else ``prose``. n tasks are a seeded shuffle
  of all of them, not stratified by kind: the mix is ShareGPT's own.

The warm corpus (warm_memory.py) is cut by the same rules from the disjoint "warm" split, where a
first user turn (no history) counts too.
"""

from __future__ import annotations

import functools
import hashlib
import random

from .. import catalog, datasets
from .task import MAX_PROMPT_CHARS, Task, answer_cap, copy_task, user_turn

# FastChat and Spec-Bench allow 1024 new tokens a turn. A 2-core CPU decoding a 1.5B model cannot
# afford that over 80 questions x 2 turns x several systems; 256 keeps the opening of most answers
# (all the drafts see) and a default run within minutes (docs/benchmarks.md has the arithmetic).
MTBENCH_MAX_NEW_TOKENS = 256
SHAREGPT_MAX_NEW_TOKENS = 256  # the same budget; shorter where the data's own answer is short
QUESTION_CHARS = 2000  # a longer user turn is a pasted document, not a follow-up
MIN_ASCII = 0.9


def _source(name: str, what: str) -> str:
    return f"{what} via {catalog.ARTIFACTS[name].parts[0].package}"


def mtbench() -> list[Task]:
    source = _source("mtbench", "MT-Bench question.jsonl (FastChat, Apache-2.0)")
    return [
        Task(
            "mtbench",
            f"{q.category}/{q.question_id}",
            None,
            user_turn(q.turns[0]),
            MTBENCH_MAX_NEW_TOKENS,
            source,
            followups=tuple(q.turns[1:]),
        )
        for q in datasets.mtbench_questions()
    ]


def sharegpt() -> list[Task]:
    return [copy_task(t) for t in _sharegpt_cuts("eval", 1)]


def warm_corpus() -> list[Task]:
    """The prompts whose answers make a warm memory: the "warm" split, first turns included."""
    return [copy_task(t) for t in _sharegpt_cuts("warm", 0)]


def seeded_sample(tasks: list[Task], n: int | None, seed: int) -> list[Task]:
    """n tasks in a seeded order (all of them if n is None); n is a prefix of n + 1."""
    tasks = list(tasks)
    random.Random(seed).shuffle(tasks)
    return tasks if n is None else tasks[:n]


@functools.lru_cache(maxsize=2)
def _sharegpt_cuts(split: str, min_exchanges: int) -> tuple[Task, ...]:
    source = _source(
        "sharegpt", f"ShareGPT V3 ({split} split of datasets.py; Apache-2.0 as published)"
    )
    pieces: dict[str, list[Task]] = {}
    for c in datasets.sharegpt_split(split):
        if t := cut(c, split, min_exchanges, source):
            pieces.setdefault(c.chat_id, []).append(t)
    return tuple(ts[_pick(split, chat, len(ts))] for chat, ts in pieces.items())


def _pick(split: str, key: str, k: int) -> int:
    """One of k, by a hash of the key: the same on every machine (Python's hash() is salted)."""
    return int.from_bytes(hashlib.sha256(f"{split}:{key}".encode()).digest()[:8], "little") % k


def _usable(conv: datasets.Conversation) -> list[dict] | None:
    msgs = list(conv.messages)
    while msgs and msgs[0]["role"] == "assistant":  # a piece of a longer chat
        msgs.pop(0)
    if not msgs or any(
        m["role"] != ("user" if i % 2 == 0 else "assistant") for i, m in enumerate(msgs)
    ):
        return None
    if any(not m["content"].strip() for m in msgs):
        return None
    text = "".join(m["content"] for m in msgs)
    return msgs if sum(ch.isascii() for ch in text) >= MIN_ASCII * len(text) else None


def cut(conv: datasets.Conversation, split: str, min_exchanges: int, source: str) -> Task | None:
    """The task of one conversation by the rules above, or None where it has no cut."""
    msgs = _usable(conv)
    if msgs is None:
        return None
    cuts = []
    for q in range(2 * min_exchanges, len(msgs) - 1, 2):  # user turns answered in the data
        question = msgs[q]["content"]
        if len(question) > QUESTION_CHARS:
            continue
        start, used = q, len(question)
        # (+ 2: Task.text joins the turns with newlines)
        while (
            start >= 2
            and (more := len(msgs[start - 2]["content"]) + len(msgs[start - 1]["content"]) + 2)
            + used
            <= MAX_PROMPT_CHARS
        ):
            start, used = start - 2, used + more
        if (q - start) // 2 >= min_exchanges:
            cuts.append((start, q))
    if not cuts:
        return None
    start, q = cuts[_pick(split, conv.id, len(cuts))]
    prompt = [dict(m) for m in msgs[start : q + 1]]
    kind = "code" if any("```" in m["content"] for m in prompt) else "prose"
    cap = min(answer_cap(len(msgs[q + 1]["content"])), SHAREGPT_MAX_NEW_TOKENS)
    return Task(
        "sharegpt" if split == "eval" else f"sharegpt-{split}",
        f"{kind}/{conv.id}/u{q // 2 + 1}",
        None,
        prompt,
        cap,
        source,
    )
