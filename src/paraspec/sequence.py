"""One generation stream's state (SequenceState) and what an engine step produced for it
(SequenceUpdate). The engine (engine.py) moves sequences through their lifecycle; drafters and
decode modes (decoding/mode.py) read and advance the state they are handed."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .decoding.gate import DraftGate
from .decoding.stats import SpecStats
from .outputs import StepTrace, TokenLogprob
from .sampling.params import SamplingParams
from .sampling.sampler import RequestSampler

if TYPE_CHECKING:
    from .decoding.mode import Detokenizer, SequenceMode
    from .decoding.proposer import Proposer
    from .model.kv_cache import KVCache


@dataclass
class SequenceState:
    """One generation stream (a request with n > 1 has n of them)."""

    key: str                     # unique: request id + sample index
    request_id: str
    group: str                   # the client request it belongs to (fair scheduling); default request_id
    index: int
    prompt: list[int]
    params: SamplingParams
    sampler: RequestSampler
    drafter: Proposer | None
    max_tokens: int
    arrival: float
    cache: KVCache | None = None
    output: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)     # prompt + output, what drafters see
    text: str = ""
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    stats: SpecStats = field(default_factory=SpecStats)
    first_token_time: float | None = None
    finish_time: float | None = None
    detok: Detokenizer | None = None
    stop_scan_from: int = 0      # text offset where the next stop-string search starts
    sent_chars: int = 0          # text already handed out as deltas
    drafting: bool = False       # its drafter has begun it (and must end it)
    mode: SequenceMode | None = None   # its decode mode's state (decoding/mode.py), None: plain
    gate: DraftGate = field(default_factory=DraftGate)   # whether its steps look for a draft
    cached_tokens: int = 0       # prompt tokens whose KV the prefix cache gave (prefix_cache.py)
    stop_ids: frozenset[int] = frozenset()   # stop_token_ids, and EOS unless ignore_eos

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class SequenceUpdate:
    """What one engine step produced for one sequence (streaming deltas)."""

    seq: SequenceState
    new_token_ids: list[int]
    new_text: str
    new_logprobs: list[TokenLogprob] | None
    finished: bool
    error: Exception | None = None    # the sequence failed (finish_reason "error"); the others went on
    trace: StepTrace | None = None


def sequence_stats(seq: SequenceState) -> dict:
    """A finished (or running) sequence's figures: prompt/generated token counts, TTFT, decode
    time and decode tokens/s (tokens after the first, over the time after the first), plus its
    parallel decoding statistics."""
    end = seq.finish_time or time.perf_counter()
    first = seq.first_token_time or end
    decode_s = end - first
    after_first = max(len(seq.output) - 1, 0)
    return {
        "prompt_tokens": len(seq.prompt),
        "cached_tokens": seq.cached_tokens,
        "generated_tokens": len(seq.output),
        "ttft_s": round(first - seq.arrival, 6),
        "decode_s": round(decode_s, 6),
        "tokens_per_s": round(after_first / decode_s, 3) if decode_s > 0 else 0.0,
        "forward_passes": seq.stats.decode_steps,     # decode forwards (prefill not counted)
        **seq.stats.as_dict(),
        **seq.sampler.stats(),       # a grammar's forced drafts (structured/sampler.py)
        **(seq.mode.stats(seq) if seq.mode is not None else {}),   # its decode mode's own figures
    }
