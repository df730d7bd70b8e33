"""A task as the suite runs it, turn by turn: the first turn is the same prompt for every system;
each later user turn (MT-Bench's second question) is asked after the system's OWN previous answer,
so a system's turn 2 continues its own conversation: [user 1, assistant <its answer>, user 2].

A run (system, mode, repeat) keeps its own conversation: a repeat's or a sampled run's turn 2
follows that run's turn 1. The answer is the run's token ids detokenised with paraspec's tokenizer
(peers return ids of the same vocabulary) and the next prompt is the chat template over the whole
conversation. Greedy paraspec systems write AR's exact tokens, so their turn-2 prompts are AR's.

Each turn is measured as a task of its own, "<task id>#<turn>" ("writing/81#2"); a single-turn
task keeps its id.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .base import BenchTask
from .task import Task

RunKey = tuple[str, str, int]  # (system, mode, repeat)


@dataclass
class Dialogue:
    first: BenchTask  # turn 1, the task's own id
    kind: str
    messages: list[dict] | None  # turn 1's chat (None: a raw completion prompt)
    followups: tuple[str, ...]
    tokenizer: Any
    # each run's conversation
    _chats: dict[RunKey, list[dict]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, t: Task, tokenizer, cap: int | None) -> "Dialogue":
        first = BenchTask(
            t.task_set,
            t.task_id,
            t.prompt_ids(tokenizer),
            min(t.max_new_tokens, cap or t.max_new_tokens),
            tuple(t.stop),
            t.source,
        )
        messages = None if t.messages is None else [dict(m) for m in t.messages]
        return cls(first, t.kind, messages, tuple(t.followups), tokenizer)

    @property
    def turns(self) -> int:
        return 1 + len(self.followups)

    def turn_id(self, turn: int) -> str:
        """The measured id of turn `turn` (0-based)."""
        return self.first.task_id if self.turns == 1 else f"{self.first.task_id}#{turn + 1}"

    def task(self, turn: int, run: RunKey) -> BenchTask | None:
        """What `run` is asked at `turn`; None where it has no answer to the turn before (a peer
        dropped on it)."""
        if turn == 0:
            if self.turns > 1:
                self._chats[run] = [dict(m) for m in self.messages]
            return dataclasses.replace(self.first, task_id=self.turn_id(0))
        chat = self._chats.get(run)
        if chat is None or chat[-1]["role"] != "assistant":
            return None
        chat.append({"role": "user", "content": self.followups[turn - 1]})
        return dataclasses.replace(
            self.first, task_id=self.turn_id(turn), prompt_ids=self.tokenizer.encode_chat(chat)
        )

    def answered(self, run: RunKey, token_ids: list[int]) -> None:
        """`run`'s answer to the turn it was last asked: the next turn follows it."""
        if (chat := self._chats.get(run)) is not None:
            chat.append({"role": "assistant", "content": self.tokenizer.decode(token_ids)})

    def chat(self, run: RunKey) -> list[dict] | None:
        """`run`'s conversation so far (its own answers included)."""
        return self._chats.get(run)
