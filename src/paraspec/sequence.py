"""One generation stream's state (SequenceState) and what an engine step produced for it
(SequenceUpdate). The engine (engine.py) moves sequences through their lifecycle; drafters and
decode modes (decoding/contract/mode.py) read and advance the state they are handed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .decoding.policy.gate import DraftGate
from .decoding.contract.stats import SpecStats
from .outputs import StepTrace, TokenLogprob, find_stop
from .sampling.params import SamplingParams
from .sampling.sampler import RequestSampler

if TYPE_CHECKING:
    from .decoding.contract.mode import Detokenizer, SequenceMode
    from .decoding.contract.proposer import Proposer
    from .model.kv_cache import KVCache


@dataclass
class SequenceState:
    """One generation stream (a request with n > 1 has n of them)."""

    key: str  # unique: request id + sample index
    request_id: str
    group: str  # the client request it belongs to (fair scheduling); default request_id
    index: int
    prompt: list[int]
    params: SamplingParams
    sampler: RequestSampler
    drafter: Proposer | None
    max_tokens: int
    arrival: float
    cache: KVCache | None = None
    output: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # prompt + output, what drafters see
    text: str = ""
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    stats: SpecStats = field(default_factory=SpecStats)
    detok: Detokenizer | None = None
    stop_scan_from: int = 0  # text offset where the next stop-string search starts
    sent_chars: int = 0  # text already handed out as deltas
    drafting: bool = False  # its drafter has begun it (and must end it)
    mode: SequenceMode | None = (
        None  # its decode mode's state (decoding/contract/mode.py), None: plain
    )
    gate: DraftGate = field(default_factory=DraftGate)  # whether its steps look for a draft
    cached_tokens: int = 0  # prompt tokens whose KV the prefix cache gave (prefix_cache.py)
    stop_ids: frozenset[int] = frozenset()  # stop_token_ids, and EOS unless ignore_eos

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def answer_identity(self) -> bytes | None:
        """What besides the prompt decides this sequence's tokens (SamplingParams.answer_identity,
        with its own seed), and the decode mode that writes them, where one does."""
        identity = self.params.answer_identity(self.sampler.seed)
        if identity is None or self.mode is None:
            return identity
        return identity + b"|mode:" + type(self.mode).__qualname__.encode()

    def append_run(
        self,
        tokens: list[int],
        logprobs: list[TokenLogprob] | None,
        max_seq_len: int,
        drafted: int = 0,
        accepted: int = 0,
    ) -> SequenceUpdate:
        """Append a run of tokens one at a time: a stop token or stop string may end inside an
        accepted run, and the tokens after it must not count, exactly as autoregressive decoding
        would have stopped there; so may max_tokens, or the context (max_seq_len) once full. The
        update holds the new text less what could still start a stop string. drafted / accepted:
        this step's draft (for the trace)."""
        stop_strs = self.params.stop
        is_stop_token = self.stop_ids.__contains__
        new_ids: list[int] = []
        text_from = own_from = len(self.text)
        last = len(tokens) - 1
        for i, tok in enumerate(tokens):
            if i == last:  # the own token's text starts here (unless the run stops early)
                own_from = len(self.text)
            self.output.append(tok)
            self.tokens.append(tok)
            new_ids.append(tok)
            if logprobs is not None:
                self.logprobs.append(logprobs[i])
            if is_stop_token(tok):
                self.finish_reason = "stop"
                break
            self.text += self.detok.push([tok])
            if stop_strs and (hit := find_stop(self.text, self.params.stop, self)) is not None:
                cut, matched = hit
                self.text = self.text[
                    : cut + (len(matched) if self.params.include_stop_str_in_output else 0)
                ]
                self.finish_reason = "stop"
                break
            if len(self.output) >= self.max_tokens:
                self.finish_reason = "length"
                break
        if self.finish_reason is None and self.cache.length + 1 >= max_seq_len:
            self.finish_reason = "length"
        if self.finished:
            if not (
                stop_strs and self.finish_reason == "stop" and not is_stop_token(self.output[-1])
            ):
                self.text += self.detok.flush()
            limit = len(self.text)
        else:
            # hold back what could still become the start of a stop string
            limit = len(self.text) - (max(map(len, stop_strs)) - 1 if stop_strs else 0)
        new_text = self.text[self.sent_chars : limit] if limit > self.sent_chars else ""
        self.sent_chars = max(self.sent_chars, limit)
        new_lp = self.logprobs[-len(new_ids) :] if logprobs is not None and new_ids else None
        end = len(self.text)
        if len(new_ids) <= last:  # stopped before the own token: the run is all drafts
            own_from = end
        trace = StepTrace(
            self.stats.decode_steps,
            drafted,
            min(accepted, len(new_ids)),
            min(text_from, end),
            min(own_from, end),
            end,
        )
        return SequenceUpdate(self, new_ids, new_text, new_lp, self.finished, trace=trace)


@dataclass
class SequenceUpdate:
    """What one engine step produced for one sequence (streaming deltas)."""

    seq: SequenceState
    new_token_ids: list[int]
    new_text: str
    new_logprobs: list[TokenLogprob] | None
    finished: bool
    error: Exception | None = (
        None  # the sequence failed (finish_reason "error"); the others went on
    )
    trace: StepTrace | None = None


def sequence_stats(seq: SequenceState) -> dict:
    """A finished (or running) sequence's figures: prompt/generated token counts, TTFT, decode
    time and decode tokens/s (tokens after the first, over the time after the first), plus its
    parallel decoding statistics."""
    timer = seq.stats.timer
    end = timer.finish_time or time.perf_counter()
    first = timer.first_token_time or end
    decode_s = end - first
    after_first = max(len(seq.output) - 1, 0)
    return {
        "prompt_tokens": len(seq.prompt),
        "cached_tokens": seq.cached_tokens,
        "generated_tokens": len(seq.output),
        "ttft_s": round(first - seq.arrival, 6),
        "decode_s": round(decode_s, 6),
        "tokens_per_s": round(after_first / decode_s, 3) if decode_s > 0 else 0.0,
        "forward_passes": seq.stats.decode_steps,  # decode forwards (prefill not counted)
        **seq.stats.as_dict(),
        **seq.sampler.stats(),  # a grammar's forced drafts (structured/sampler.py)
        **(seq.mode.stats(seq) if seq.mode is not None else {}),  # its decode mode's own figures
    }
