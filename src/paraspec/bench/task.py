"""The bench's Task and what every task set builds its prompts with: the prompt budget, the chat
turn and the answer cap."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

PROMPT_TOKEN_BUDGET = 1536  # well inside the smallest model's context, and quick to prefill
MAX_PROMPT_CHARS = 4500  # ~1.5k tokens even for code at ~3 chars/token
MATERIAL_CHARS = 3800  # the quoted text; the rest of MAX_PROMPT_CHARS is the instruction
PY = f"{sys.version_info.major}.{sys.version_info.minor}"  # the stdlib and reference quoted, by version


@dataclass
class Task:
    task_set: str
    task_id: str  # unique in its set: "<kind>/<item>", or HumanEval's own id
    prompt: str | None  # a raw completion prompt (HumanEval) ...
    messages: list[dict] | None  # ... or a chat request
    max_new_tokens: int
    source: str  # where the text comes from, and its licence
    stop: tuple[str, ...] = ()  # strings that also end the answer (besides EOS)
    # Later user turns (MT-Bench's second question): each is asked after the answering system's
    # own previous answer, so every system sees a conversation of its own (dialogue.py).
    followups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError(f"task {self.task_id}: set exactly one of prompt and messages")
        if self.followups and self.messages is None:
            raise ValueError(
                f"task {self.task_id}: follow-up turns need a chat (messages), not a raw prompt"
            )

    @property
    def kind(self) -> str:
        return self.task_id.split("/", 1)[0]

    def prompt_ids(self, tokenizer) -> list[int]:
        """The token ids the model is given: the raw prompt, or the messages in the chat template."""
        return (
            tokenizer.encode(self.prompt)
            if self.prompt is not None
            else tokenizer.encode_chat(self.messages)
        )

    @property
    def text(self) -> str:
        """All of the prompt's text, for budgets and cost estimates (the first turn's)."""
        return (
            self.prompt
            if self.prompt is not None
            else "\n".join(m["content"] for m in self.messages)
        )

    @property
    def turns(self) -> int:
        return 1 + len(self.followups)


def answer_cap(answer_chars: int) -> int:
    """max_new_tokens for an answer of about answer_chars: ~3.5 chars/token plus 25 % and some slack,
    so a faithful answer ends by itself rather than at the cap."""
    return max(64, min(384, math.ceil(answer_chars / 3.5 * 1.25) + 32))


def user_turn(text: str) -> list[dict]:
    assert len(text) <= MAX_PROMPT_CHARS, len(text)
    return [{"role": "user", "content": text}]


def copy_task(t: Task) -> Task:
    # Cached tasks are handed out as copies: a caller that edits its messages must not change ours.
    messages = None if t.messages is None else [dict(m) for m in t.messages]
    return Task(
        t.task_set, t.task_id, t.prompt, messages, t.max_new_tokens, t.source, t.stop, t.followups
    )
