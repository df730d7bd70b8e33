"""What a step hands out besides tokens: their log-probabilities, how the run came about (the
step trace), and where a stop string ends the text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, Sequence

import torch


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


class StepTrace(
    NamedTuple
):  # a tuple: built once per sequence and step, 3x cheaper than a dataclass
    """How one step's run of tokens came about, for viewers of the decoding (the playground).

    A decode step emits its accepted draft tokens first and the model's own (bonus) token last;
    the prefill step emits one token of the model's own. Text offsets are code points into the
    sequence's generated text: [text_from, own_from) is the accepted drafts' text, [own_from,
    text_to) the own token's (a token whose bytes end mid-character shows up in a later step)."""

    step: int  # the sequence's decode step (0: the first token, from the prefill)
    drafted: int  # draft tokens this step's forward verified
    accepted: int  # of those accepted: the run's first `accepted` tokens
    text_from: int
    own_from: int
    text_to: int


def token_logprobs(
    logits: torch.Tensor, rows: list[int], tokens: list[int], top: int | None
) -> list[TokenLogprob] | None:
    """Log-probabilities of the model's distribution (before sampling filters) at each
    emitted token: drafts accepted in a verification pass get them from that pass."""
    if top is None:
        return None
    lsm = torch.log_softmax(logits[rows].float(), -1)
    chosen = lsm[torch.arange(len(rows)), torch.tensor(tokens)].tolist()
    out = []
    if top > 0:
        vals, ids = lsm.topk(top, -1)
        for i, t in enumerate(tokens):
            out.append(TokenLogprob(t, chosen[i], list(zip(ids[i].tolist(), vals[i].tolist()))))
    else:
        out = [TokenLogprob(t, c) for t, c in zip(tokens, chosen)]
    return out


class _StopScan(Protocol):
    stop_scan_from: int


def find_stop(text: str, stops: Sequence[str], scan: _StopScan) -> tuple[int, str] | None:
    """The earliest stop string in `text` as (offset, string), searching only what is new since the
    last call (scan.stop_scan_from, moved to the end) plus the longest stop's overlap."""
    best = None
    longest = max(len(s) for s in stops)
    start = max(0, scan.stop_scan_from - longest)
    for s in stops:
        i = text.find(s, start)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, s)
    scan.stop_scan_from = len(text)
    return best
