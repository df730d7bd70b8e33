"""DraftGate: whether looking for a draft pays for the look itself, per sequence.

The draft policy (draft_policy.py) prices the rows a draft adds to the forward. Looking costs
too: the drafter's Python work (matching the trie, merging the sources, scoring last steps'
candidates) is a share of a step that is sizeable on a small model and nothing on a large one,
and on text that nothing can be copied into it buys nothing. The gate weighs it with what the
engine timed on this sequence's own steps:

    looked:     committed tokens / (its share of the forward + propose + accept, observe, emit)
    not looked: one token        / (a one-row step's share + accept, observe, emit)

Where looking loses over the sequence so far (all its looks together: copies come in stretches,
and the looks between two stretches are what finds the next) and the last look did not pay
either, the next steps skip the drafter's propose (it still observes every committed token: its
memories stay whole) and look again after 1, 2, 4 ... MAX_SKIP skipped steps; a look that pays
(a copy starting) makes the next step look too. The looks while skipping sample the sequence
evenly, so its totals stay fair. Only the choice of draft changes, never a token: decoding
stays exact whichever steps look.
"""

from __future__ import annotations

from dataclasses import dataclass

PLAIN_ALPHA = 0.15  # EMA weight of a step in a plain step's time
WARMUP = 8  # looked steps before the gate may close
MAX_SKIP = 4  # the longest run of skipped steps between two looks


@dataclass
class DraftGate:
    tokens: int = 0  # committed tokens of the looked steps
    looked_s: float = 0.0  # their seconds (the sequence's share)
    looks: int = 0
    plain_s: float = 0.0  # EMA seconds of a step without a look
    plain: int = 0  # steps that measured plain_s
    backoff: int = 0  # skipped steps before the next look, when looking loses again
    skip: int = 0  # steps left to skip

    def look(self) -> bool:
        """Whether this step asks the drafter for a draft."""
        if self.skip > 0:
            self.skip -= 1
            return False
        return True

    def update(
        self,
        looked: bool,
        tokens: int,
        forward_s: float,
        rows_cost: float,
        propose_s: float,
        other_s: float,
    ) -> None:
        """A decode step of the sequence: whether it looked, its committed tokens, its share of the
        forward's seconds and its rows' cost (t(rows)/t(1)), the propose's seconds, and those of
        the rest (accept, observe, emit)."""
        step_s = forward_s + propose_s + other_s
        if rows_cost == 1.0 or not self.plain:
            # a step without the look: measured on one-row steps (skipped, or looks that sent
            # nothing: their observe is dearer, which leans to looking); until there is one, a
            # drafted step's one row by the cost curve
            plain = forward_s / rows_cost + other_s
            self.plain_s = (
                plain if not self.plain else self.plain_s + PLAIN_ALPHA * (plain - self.plain_s)
            )
            self.plain += 1
        if not looked:
            return
        self.tokens += tokens
        self.looked_s += step_s
        self.looks += 1
        if (
            self.looks < WARMUP
            or tokens * self.plain_s >= step_s
            or self.tokens * self.plain_s >= self.looked_s
        ):
            self.backoff = 0
        else:
            self.backoff = min(max(1, 2 * self.backoff), MAX_SKIP)
            self.skip = self.backoff
