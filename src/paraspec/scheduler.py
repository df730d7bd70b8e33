"""Which waiting sequence the engine admits next, and whether a step prefills or decodes.

Fairness across requests: a client request may hold many sequences (prompts x n). Admitting in
arrival order lets one request of 400 sequences delay a 4-token chat request sent after it by every
one of those prefills. Instead the next admitted sequence belongs to the request holding the fewest
sequences in the batch (ties: the earliest), so every waiting request gets a slot as soon as one
frees, and a large request is spread over the batch rather than owning it.

Chunked prefill: a long prompt is prefilled one chunk per step; its first chunk runs as soon as it
is admitted, the next ones alternate with the decode steps of the running sequences, so their
inter-token latency is bounded by a chunk's forward instead of the whole prompt's. (Prompts of one
chunk are thus admitted back to back, as before: a short prefill costs about a decode step.)
Several prompts may be mid-prefill at once; the one with the fewest tokens left goes first, so a
short request arriving during a long prefill gets its first token without waiting for it. The chunks are fixed by the prompt alone (positions 0, C, 2C, ...), never by the
load, so a request's tokens are the same however it was scheduled.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol, Sequence


class _Seq(Protocol):
    group: str


class _Prefilling(Protocol):
    prompt: list[int]
    cache: object | None  # None until its first chunk runs; then its KV (a .length)


def next_prefill(
    prefilling: Sequence[_Prefilling], decoding: bool, prefill_turn: bool
) -> _Prefilling | None:
    """The prompt whose next chunk this step runs, or None for a decode step: the prompt with the
    fewest tokens left; its first chunk at once, further ones only on a prefill turn (prefill and
    decode alternate while both have work) or when nothing is decoding."""
    seq = min(
        prefilling, key=lambda s: len(s.prompt) - (s.cache.length if s.cache else 0), default=None
    )
    if seq is not None and (seq.cache is None or prefill_turn or not decoding):
        return seq
    return None


def fair_pick(waiting: Sequence[_Seq], held: Sequence[_Seq]) -> int:
    """Index in `waiting` of the next sequence to admit: the first waiting one of the group that
    holds the fewest sequences in `held` (running or prefilling); ties go to the earliest arrival."""
    count = Counter(s.group for s in held)
    best, best_held = 0, None
    seen: set[str] = set()
    for i, s in enumerate(waiting):
        if s.group in seen:
            continue
        seen.add(s.group)
        if best_held is None or count[s.group] < best_held:
            best, best_held = i, count[s.group]
            if best_held == 0:
                break  # nobody holds fewer than nothing
    return best
