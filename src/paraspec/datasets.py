"""The field's own chat workloads, read from the files `paraspec fetch` caches (catalog.py).

- MT-Bench: 80 questions of two turns in 8 categories (FastChat's question.jsonl, the multi-turn
  part of Spec-Bench). The second turn is asked after the answering system's own first answer.
- ShareGPT V3: real user conversations. The published file is cut short (~120 MiB), so json.load
  fails on it; the list is read element by element and the cut element dropped.

ShareGPT conversations are split by the conversation they came from, never by turn: the file
holds long chats cut into pieces ("abc_0", "abc_11", ...) that share one history, so pieces of a
chat always land in the same split. The split is a seeded hash of that id, stable across runs and
machines, and every user of the file draws from its own split:

    eval    10 %  the bench's `sharegpt` set and ASPD's held-out evaluation
    warm    10 %  the corpus whose answers pre-fill a warm memory (never benchmarked)
    train   80 %  ASPD's training data
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import catalog
from .errors import ConfigError

SPLITS = {"eval": 10, "warm": 10, "train": 80}  # percent of conversations
SPLIT_SEED = 0
MTBENCH_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)

_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "system": "system",
}


class DataFileError(ConfigError):
    """A data file that is missing or does not parse."""


@dataclass(frozen=True)
class MTBenchQuestion:
    question_id: int
    category: str
    turns: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    id: str  # ShareGPT's id ("<chat>_<piece>")
    messages: tuple[dict, ...]  # {"role": "system"|"user"|"assistant", "content": str}, in order

    @property
    def chat_id(self) -> str:
        return self.id.rsplit("_", 1)[0]


def mtbench_questions(path: Path | None = None) -> list[MTBenchQuestion]:
    """All 80 questions in file order."""
    path = path or catalog.cached_path("mtbench")
    out = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            out.append(
                MTBenchQuestion(
                    int(q["question_id"]), str(q["category"]), tuple(str(t) for t in q["turns"])
                )
            )
        except (ValueError, KeyError, TypeError) as e:
            raise DataFileError(
                f"{path}:{no} is not an MT-Bench question ({type(e).__name__}: {e}); "
                "fetch the file again with `paraspec fetch mtbench`"
            ) from None
    if not out:
        raise DataFileError(
            f"{path} holds no MT-Bench questions; fetch it again with `paraspec fetch mtbench`"
        )
    return out


_SEP = re.compile(r"\s*,?\s*")


def sharegpt_conversations(path: Path | None = None) -> Iterator[Conversation]:
    """Every whole conversation in file order, roles as the chat template names them. Turns of a
    role the template does not know are dropped; a conversation left without a user turn is skipped."""
    path = path or catalog.cached_path("sharegpt")
    text = path.read_text(encoding="utf-8")
    start = text.find("[")
    if start < 0:
        raise DataFileError(
            f"{path} is not a JSON list of ShareGPT conversations; fetch it again with "
            "`paraspec fetch sharegpt`"
        )
    decoder, i, n = json.JSONDecoder(), start + 1, 0
    while True:
        i = _SEP.match(text, i).end()
        if i >= len(text) or text[i] == "]":
            break
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # the cut element at the end of the published file
        try:
            messages = tuple(
                {"role": _ROLES[t["from"]], "content": str(t["value"])}
                for t in item["conversations"]
                if t.get("from") in _ROLES
            )
            cid = str(item["id"])
        except (KeyError, TypeError) as e:
            raise DataFileError(
                f"{path}: element {n} is not a ShareGPT conversation ({type(e).__name__}: {e}); "
                "fetch the file again with `paraspec fetch sharegpt`"
            ) from None
        n += 1
        if any(m["role"] == "user" for m in messages):
            yield Conversation(cid, messages)
    if n == 0:
        raise DataFileError(
            f"{path} holds no ShareGPT conversations; fetch it again with `paraspec fetch sharegpt`"
        )


def split_of(chat_id: str, seed: int = SPLIT_SEED) -> str:
    """Which split a conversation belongs to, from a hash of its chat id and the seed."""
    bucket = (
        int.from_bytes(hashlib.sha256(f"{seed}:{chat_id}".encode()).digest()[:8], "little") % 100
    )
    for name, share in SPLITS.items():
        if bucket < share:
            return name
        bucket -= share
    raise AssertionError("SPLITS must add up to 100")


@functools.lru_cache(maxsize=4)
def sharegpt_split(
    split: str, seed: int = SPLIT_SEED, path: Path | None = None
) -> tuple[Conversation, ...]:
    """The conversations of one split, in file order."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    return tuple(c for c in sharegpt_conversations(path) if split_of(c.chat_id, seed) == split)
