"""SpecStats: per-request decoding statistics, as data. Readers (CLI, metrics) format them.

Convention: "accepted tokens per step" counts every token a decode step emits, i.e. accepted
draft tokens plus the bonus token, so plain decoding scores exactly 1.0.
"""
from __future__ import annotations

from dataclasses import dataclass, field


# Why a decode step verified no draft: counted per request (SpecStats.no_draft), so a request
# that ran at 1.00 tokens/step says which of these held it there.
GATE_CLOSED = "gate_closed"        # the draft gate skipped the look: looks were not paying (gate.py)
NO_MATCH = "no_match"              # the drafter had no candidate for this context
ROWS_TOO_DEAR = "rows_too_dear"    # candidates, none worth its rows by the cost curve (draft_policy.py)
NO_ROOM = "no_room"                # max_tokens or the context left no room for a draft
NO_DRAFT_REASONS = (GATE_CLOSED, NO_MATCH, ROWS_TOO_DEAR, NO_ROOM)


@dataclass
class SpecStats:
    decode_steps: int = 0
    draft_tokens: int = 0            # draft nodes proposed (verified) over all steps
    accepted_draft_tokens: int = 0   # of those, accepted
    emitted_tokens: int = 0          # tokens emitted by decode steps (accepted + bonus)
    accepted_per_step_hist: dict[int, int] = field(default_factory=dict)
    draft_s: float = 0.0             # time in the drafter (propose + observe)
    model_s: float = 0.0             # time in the model forward (+ acceptance)
    no_draft: dict[str, int] = field(default_factory=dict)   # steps without a draft, per reason

    def observe_step(self, drafted: int, emitted: int, draft_s: float, model_s: float,
                     no_draft: str | None = None) -> None:
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
            "accepted_tokens_per_step_histogram": {str(k): v for k, v in sorted(self.accepted_per_step_hist.items())},
            "draft_s": round(self.draft_s, 6),
            "model_s": round(self.model_s, 6),
            "no_draft_steps": dict(sorted(self.no_draft.items())),
        }
