"""Responses built from the engine's deltas, for both endpoints: ChoiceState assembles one output;
usage and paraspec_stats close a response; chunk_extension, sse and error_event make a stream's
chunks; merge_streams interleaves the deltas of several requests (one per prompt) as they arrive.

Each accepted run of tokens arrives as one Delta and becomes one SSE chunk: parallel decoding
streams in runs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import AsyncIterator

from ..outputs import TokenLogprob
from .api_errors import error_for
from .engine_client import Delta, EngineStream
from .protocol import PromptTokensDetails, UsageInfo


@dataclass
class ChoiceState:
    """One output being assembled (index = prompt index * n + sample index)."""

    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    stats: dict | None = None
    started: bool = False
    steps: list[dict] = field(default_factory=list)  # traced steps not yet sent (stream_steps)
    chars: int = 0  # code points of generated text handed out so far

    def add(self, d: Delta, trace: bool = False) -> None:
        """trace: keep the step for the stream's `paraspec.steps` (stream_steps)."""
        self.text.append(d.text)
        self.chars += len(d.text)
        self.token_ids += d.token_ids
        if d.logprobs:
            self.logprobs += d.logprobs
        if d.finish_reason is not None:
            self.finish_reason, self.stats = d.finish_reason, d.stats
        if trace and d.trace is not None:
            self.steps.append(step_entry(d))


def paraspec_stats(plugin: str | None, choices: list[ChoiceState]) -> dict:
    """Per-request decoding stats: totals over the choices, then each choice's own."""
    stats = [c.stats or {} for c in choices]
    steps = sum(s.get("decode_steps", 0) for s in stats)
    emitted = sum(
        s.get("mean_accepted_tokens_per_step", 0.0) * s.get("decode_steps", 0) for s in stats
    )
    drafted = sum(s.get("draft_tokens", 0) for s in stats)
    accepted = sum(s.get("accepted_draft_tokens", 0) for s in stats)
    return {
        "plugin": plugin,
        "decode_steps": steps,
        "draft_tokens": drafted,
        "accepted_draft_tokens": accepted,
        "mean_accepted_tokens_per_step": round(emitted / steps, 4) if steps else 0.0,
        "acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0,
        "choices": stats,
    }


def chunk_extension(c: ChoiceState, d: Delta, index: int, trace: bool) -> dict | None:
    """A stream chunk's `paraspec` field: the sample's statistics on its last chunk, and with
    paraspec.stream_steps the steps whose text has been sent with this chunk or before (text
    held back for a stop string keeps its steps back too; the last chunk sends the rest, cut
    to the text the stop string left). None keeps the chunk as plain OpenAI sends it."""
    ext = {"index": index, **d.stats} if d.stats else None
    if trace and c.steps:
        final = d.finish_reason is not None
        ready = 0
        while ready < len(c.steps) and (final or c.steps[ready]["text"][2] <= c.chars):
            ready += 1
        if ready:
            steps, c.steps = c.steps[:ready], c.steps[ready:]
            if final:
                for s in steps:
                    s["text"] = [min(x, c.chars) for x in s["text"]]
            ext = (ext or {"index": index}) | {"steps": steps}
    return ext


def usage(prompt_lens: list[int], choices: list[ChoiceState]) -> UsageInfo:
    completion = sum(len(c.token_ids) for c in choices)
    # a prompt's first sample's
    cached = sum((c.stats or {}).get("cached_tokens", 0) for c in choices)
    return UsageInfo(
        prompt_tokens=sum(prompt_lens),
        completion_tokens=completion,
        total_tokens=sum(prompt_lens) + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


def error_event(e: BaseException) -> str:
    return f"data: {error_for(e).response().model_dump_json()}\n\n"


async def merge_streams(streams: list[EngineStream]) -> AsyncIterator[tuple[int, Delta]]:
    """Deltas of several requests as they arrive, tagged with the request's position."""
    if len(streams) == 1:
        async for d in streams[0]:
            yield 0, d
        return
    q: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, s: EngineStream) -> None:
        try:
            async for d in s:
                q.put_nowait((i, d))
            q.put_nowait((i, None))
        except Exception as e:
            q.put_nowait((i, e))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(streams)
        while remaining:
            i, item = await q.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()


def step_entry(d: Delta) -> dict:
    """One traced step as the stream sends it. text: [from, own, to], code-point offsets into the
    sample's generated text (echo excluded): [from, own) is the accepted draft tokens' text, [own, to)
    the model's own token's; the run is `accepted` draft tokens, then the model's own."""
    t = d.trace
    return {
        "step": t.step,
        "tokens": len(d.token_ids),
        "drafted": t.drafted,
        "accepted": t.accepted,
        "text": [t.text_from, t.own_from, t.text_to],
    }


def sse(chunk) -> str:
    return f"data: {chunk.model_dump_json()}\n\n"
