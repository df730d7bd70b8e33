"""SpecStats: per-request decoding statistics, as data. Readers (CLI, metrics) format them.
PhaseTimer: the clock through which the engine times a sequence's phases into them.

Convention: "accepted tokens per step" counts every token a decode step emits, i.e. accepted
draft tokens plus the bonus token, so plain decoding scores exactly 1.0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

T = TypeVar("T")


# Why a decode step verified no draft: counted per request (SpecStats.no_draft), so a request
# that ran at 1.00 tokens/step says which of these held it there.
GATE_CLOSED = "gate_closed"  # the draft gate skipped the look: looks were not paying (gate.py)
NO_MATCH = "no_match"  # the drafter had no candidate for this context
ROWS_TOO_DEAR = (
    "rows_too_dear"  # candidates, none worth its rows by the cost curve (draft_policy.py)
)
NO_ROOM = "no_room"  # max_tokens or the context left no room for a draft
NO_DRAFT_REASONS = (GATE_CLOSED, NO_MATCH, ROWS_TOO_DEAR, NO_ROOM)


@dataclass
class SpecStats:
    decode_steps: int = 0
    draft_tokens: int = 0  # draft nodes proposed (verified) over all steps
    accepted_draft_tokens: int = 0  # of those, accepted
    emitted_tokens: int = 0  # tokens emitted by decode steps (accepted + bonus)
    accepted_per_step_hist: dict[int, int] = field(default_factory=dict)
    draft_s: float = 0.0  # time in the drafter (propose + observe)
    model_s: float = 0.0  # time in the model forward (+ acceptance)
    no_draft: dict[str, int] = field(default_factory=dict)  # steps without a draft, per reason
    timer: PhaseTimer = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.timer = PhaseTimer(self)

    def observe_step(
        self,
        drafted: int,
        emitted: int,
        draft_s: float,
        model_s: float,
        no_draft: str | None = None,
    ) -> None:
        """One decode step; no_draft: why it verified no draft (one of NO_DRAFT_REASONS), if so."""
        if not drafted and no_draft is not None:
            self.no_draft[no_draft] = self.no_draft.get(no_draft, 0) + 1
        self.decode_steps += 1
        self.draft_tokens += drafted
        self.accepted_draft_tokens += max(emitted - 1, 0)
        self.emitted_tokens += emitted
        self.accepted_per_step_hist[emitted] = self.accepted_per_step_hist.get(emitted, 0) + 1
        self.draft_s += draft_s
        self.model_s += model_s

    @property
    def mean_accepted_per_step(self) -> float:
        return self.emitted_tokens / self.decode_steps if self.decode_steps else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_draft_tokens / self.draft_tokens if self.draft_tokens else 0.0

    def as_dict(self) -> dict:
        return {
            "decode_steps": self.decode_steps,
            "draft_tokens": self.draft_tokens,
            "accepted_draft_tokens": self.accepted_draft_tokens,
            "mean_accepted_tokens_per_step": round(self.mean_accepted_per_step, 4),
            "acceptance_rate": round(self.acceptance_rate, 4),
            "accepted_tokens_per_step_histogram": {
                str(k): v for k, v in sorted(self.accepted_per_step_hist.items())
            },
            "draft_s": round(self.draft_s, 6),
            "model_s": round(self.model_s, 6),
            "no_draft_steps": dict(sorted(self.no_draft.items())),
        }


class PhaseTimer:
    """One sequence's clock: the engine marks where its phases begin and end, the seconds are
    worked out here. A decode step, per sequence:

        start .. proposed          propose: the draft's seconds (propose_s)
        (the batch's forward, timed once for all: timed)
        start .. committed         accept: the tree walk and the KV commit (accept_s)
        committed .. observed      observe: the drafter's again; the step goes into the stats
        start .. elapsed()         everything after the forward (the draft gate's other_s)

    Marks rather than context managers: they run several times per sequence and step, and an
    object per phase would cost more than the clock reading it wraps."""

    __slots__ = (
        "_stats",
        "_start",
        "_mark",
        "propose_s",
        "accept_s",
        "first_token_time",
        "finish_time",
    )

    def __init__(self, stats: SpecStats):
        self._stats = stats
        self._start = self._mark = 0.0
        self.propose_s = self.accept_s = 0.0  # this step's
        self.first_token_time: float | None = None
        self.finish_time: float | None = None

    def start(self) -> None:
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def proposed(self) -> None:
        self.propose_s = time.perf_counter() - self._start

    def committed(self) -> None:
        self._mark = now = time.perf_counter()
        self.accept_s = now - self._start

    def observed(self, drafted: int, emitted: int, forward_s: float, no_draft: str | None) -> None:
        """The step into the stats: the drafter's seconds (propose + observe) and the model's
        (its forward + the accept)."""
        draft_s = self.propose_s + time.perf_counter() - self._mark
        self._stats.observe_step(drafted, emitted, draft_s, forward_s + self.accept_s, no_draft)

    def draft(self, call: Callable[..., object], *args) -> None:
        """A drafter call outside the steps (begin, end): its seconds are drafter time too. Its own
        reading, not start(): an end() may run inside a step's accept, whose start still counts."""
        t0 = time.perf_counter()
        call(*args)
        self._stats.draft_s += time.perf_counter() - t0

    def first_token(self) -> None:
        self.first_token_time = time.perf_counter()

    def finish(self) -> None:
        self.finish_time = time.perf_counter()


def timed(fn: Callable[..., T], *args) -> tuple[T, float]:
    """fn(*args) and its seconds, on the clock PhaseTimer reads (a step's forward, shared by
    its sequences)."""
    t0 = time.perf_counter()
    return fn(*args), time.perf_counter() - t0
