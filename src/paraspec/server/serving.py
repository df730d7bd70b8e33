"""What the completion and chat handlers share: validation of everything a client can get wrong,
limits, per-request plugin overrides, submission to the EngineClient, logprobs, usage and stats, the
API errors, and merging several requests' streams (serving_completion.py and serving_chat.py build
the responses).

Everything a client can get wrong is checked before anything reaches the engine, so it comes back
as HTTP 400 rather than as an error event inside a 200 stream. Each accepted run of tokens arrives
as one Delta and becomes one SSE chunk: parallel decoding streams in runs.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

from ..config import PluginConfig, parse_plugin_params
from ..outputs import TokenLogprob
from ..errors import ParaspecError
from ..model.tokenizer import Tokenizer
from ..sampling.params import SamplingParams
from .async_engine import DEFAULT, Delta, EngineDeadError, RequestTimeoutError, ServerBusyError
from .config import ServiceConfig
from .engine_client import EngineClient, EngineStepError, EngineStream, ShuttingDownError
from .protocol import (ChatCompletionLogProb, ChatCompletionLogProbs, ChatCompletionLogProbsContent,
                       ChatCompletionRequest, CompletionLogProbs, CompletionRequest, ErrorInfo, ErrorResponse,
                       PromptTokensDetails, UsageInfo)

logger = logging.getLogger("paraspec.server")

MIN_LOGPROB = -9999.0               # JSON has no -inf
BIG_PROMPT_CHARS = 20_000           # tokenised off the event loop above this


class APIError(Exception):
    """An error with its HTTP status and OpenAI error fields; app.py renders it."""

    def __init__(self, message: str, status: int = 400, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.type, self.param, self.code = status, type, param, code

    def response(self) -> ErrorResponse:
        return ErrorResponse(error=ErrorInfo(message=str(self), type=self.type, param=self.param, code=self.code))


@dataclass
class ChoiceState:
    """One output being assembled (index = prompt index * n + sample index)."""

    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    stats: dict | None = None
    started: bool = False
    steps: list[dict] = field(default_factory=list)     # traced steps not yet sent (stream_steps)
    chars: int = 0               # code points of generated text handed out so far

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


class OpenAIServing:
    """What both endpoints share: the model check, limits, plugin overrides, submission, logprobs."""

    def __init__(self, engine: EngineClient, tokenizer: Tokenizer, config: ServiceConfig, *, model_name: str,
                 vocab_size: int, model_max_len: int):
        self.engine, self.tokenizer, self.config = engine, tokenizer, config
        self.model_name = model_name
        self.vocab_size = vocab_size
        deploy = config.model_deploy
        self.max_seq_len = min(deploy.max_seq_len, model_max_len)
        self.max_input_len = min(deploy.max_input_token_len, self.max_seq_len - 1)
        self.max_output = config.schedule.max_iter_times
        self._token_text: dict[int, str] = {}

    # ---------------------------------------------------------------- validation

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise APIError(f"the model {model!r} does not exist; this server serves {self.model_name!r} "
                           "(see GET /v1/models)", param="model", code="model_not_found")

    def check_prompt(self, ids: list[int], param: str) -> list[int]:
        if not ids:
            raise APIError("the prompt is empty; send at least one token of text", param=param)
        if len(ids) > self.max_input_len:
            if self.config.model_deploy.truncation:
                ids = ids[-self.max_input_len:]          # MindIE's truncation keeps the end
            else:
                raise APIError(f"the prompt has {len(ids)} tokens, more than this server's limit of "
                               f"{self.max_input_len} (maxInputTokenLen); shorten it", param=param,
                               code="context_length_exceeded")
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise APIError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})", param=param)
        return ids

    def max_tokens(self, requested: int | None, prompt_len: int, default: int | None) -> int:
        """The request's max_tokens, checked against maxIterTimes and the context left after the prompt."""
        room = self.max_seq_len - prompt_len
        if requested is None:
            return max(1, min(default or room, room, self.max_output))
        if not isinstance(requested, int) or requested < 1:
            return requested                  # SamplingParams words this error
        if requested > self.max_output:
            raise APIError(f"max_tokens={requested} is above this server's limit of {self.max_output} tokens "
                           "per request (maxIterTimes); ask for fewer", param="max_tokens")
        if requested > room:
            raise APIError(f"this model's maximum context length is {self.max_seq_len} tokens, but {prompt_len} "
                           f"prompt tokens + max_tokens={requested} = {prompt_len + requested}; shorten the prompt "
                           "or lower max_tokens", param="max_tokens", code="context_length_exceeded")
        return requested

    def check_common(self, req: CompletionRequest | ChatCompletionRequest) -> None:
        self.check_model(req.model)
        if req.logit_bias:
            raise APIError("logit_bias is not supported; leave it out", param="logit_bias")
        if req.stream_options is not None and not req.stream:
            raise APIError("stream_options is only allowed with stream=true", param="stream_options")
        if req.paraspec is not None and req.paraspec.stream_steps and not req.stream:
            raise APIError("paraspec.stream_steps is only allowed with stream=true", param="paraspec.stream_steps")
        for i, stop in enumerate([req.stop] if isinstance(req.stop, str) else req.stop or []):
            try:
                stop.encode("utf-8")
            except UnicodeEncodeError as e:     # as in messages: not text a model can write
                where = "stop" if isinstance(req.stop, str) else f"stop[{i}]"
                raise APIError(f"{where} holds an invalid Unicode character {stop[e.start]!r} at offset "
                               f"{e.start} (a lone surrogate); send valid UTF-16 pairs or drop it",
                               param="stop") from None

    def plugin_spec(self, req: CompletionRequest | ChatCompletionRequest) -> tuple[Any, str | None]:
        """The drafter for this request: the server's, or `paraspec.plugin_params` validated against
        the server's speculationGamma. Returns (spec for AsyncEngine.add, plugin name for stats)."""
        opts = req.paraspec
        if opts is None or "plugin_params" not in opts.model_fields_set:
            return DEFAULT, self.engine.default_plugin
        value = opts.plugin_params
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")) or value == {}:
            return None, None
        if _plain_decoding(value):
            return None, None
        gamma = self.config.model_deploy.speculation_gamma
        try:
            plugin = parse_plugin_params(value, gamma)
        except ParaspecError as e:    # (a plugin's own checks name its keys "lookahead.level", ...)
            why = f"paraspec.{e}" if str(e).startswith("plugin_params") else f"paraspec.plugin_params: {e}"
            raise APIError(why + (f" (this server's speculationGamma is {gamma})" if gamma is not None else ""),
                           param="paraspec.plugin_params") from None
        return plugin, plugin.plugin_type

    def fit_text(self, text: str, param: str) -> str:
        """Refuse, before tokenizing, a text that cannot fit in maxInputTokenLen whatever its tokens
        (a 15 MB prompt costs milliseconds, not seconds and a GB); with truncation, keep only a tail
        long enough for the last maxInputTokenLen tokens."""
        least = self.tokenizer.min_tokens(len(text))
        if least <= self.max_input_len:
            return text
        if self.config.model_deploy.truncation:
            # twice the characters the kept tokens can span: the cut's own tokens are dropped anyway
            return text[-2 * self.max_input_len * self.tokenizer.max_token_chars:]
        raise APIError(f"the prompt has {len(text)} characters, so at least {least} tokens, more than this "
                       f"server's limit of {self.max_input_len} (maxInputTokenLen); shorten it", param=param,
                       code="context_length_exceeded")

    async def encode(self, text: str, param: str = "prompt", add_bos: bool | None = None) -> list[int]:
        text = self.fit_text(text, param)
        try:
            if len(text) > BIG_PROMPT_CHARS:    # the tokenizer releases the GIL: the event loop runs on
                return await asyncio.to_thread(self.tokenizer.encode, text, add_bos)
            return self.tokenizer.encode(text, add_bos)
        except ParaspecError as e:              # e.g. a lone surrogate: name the field
            raise APIError(str(e), param=param) from None

    # ---------------------------------------------------------------- engine

    def submit(self, request_id: str, prompts: list[list[int]], params: list[SamplingParams],
               plugin: str | PluginConfig | None) -> list[EngineStream]:
        self.engine.check_capacity(sum(sp.n for sp in params))
        ids = [request_id] if len(prompts) == 1 else [f"{request_id}-{i}" for i in range(len(prompts))]
        streams: list[EngineStream] = []
        try:
            for rid, p, sp in zip(ids, prompts, params):
                streams.append(self.engine.add(p, sp, rid, plugin, group=request_id, checked=True))
        except BaseException:
            for s in streams:
                s.close()
            raise
        return streams

    # ---------------------------------------------------------------- outputs

    def token_text(self, token_id: int) -> str:
        text = self._token_text.get(token_id)
        if text is None:
            text = self._token_text[token_id] = self.tokenizer.decode([token_id], skip_special=False)
        return text

    def completion_logprobs(self, lps: Sequence[TokenLogprob], offset: int) -> CompletionLogProbs:
        out = CompletionLogProbs()
        for lp in lps:
            tok = self.token_text(lp.token_id)
            top = {self.token_text(t): max(v, MIN_LOGPROB) for t, v in lp.top}
            top.setdefault(tok, max(lp.logprob, MIN_LOGPROB))
            out.tokens.append(tok)
            out.token_logprobs.append(max(lp.logprob, MIN_LOGPROB))
            out.top_logprobs.append(top)
            out.text_offset.append(offset)
            offset += len(tok)
        return out

    def chat_logprobs(self, lps: Sequence[TokenLogprob]) -> ChatCompletionLogProbs:
        def entry(token_id: int, logprob: float) -> dict:
            tok = self.token_text(token_id)
            return {"token": tok, "logprob": max(logprob, MIN_LOGPROB), "bytes": list(tok.encode("utf-8"))}

        return ChatCompletionLogProbs(content=[
            ChatCompletionLogProbsContent(**entry(lp.token_id, lp.logprob),
                                          top_logprobs=[ChatCompletionLogProb(**entry(t, v)) for t, v in lp.top])
            for lp in lps])

    @staticmethod
    def paraspec_stats(plugin: str | None, choices: list[ChoiceState]) -> dict:
        """Per-request decoding stats: totals over the choices, then each choice's own."""
        stats = [c.stats or {} for c in choices]
        steps = sum(s.get("decode_steps", 0) for s in stats)
        emitted = sum(s.get("mean_accepted_tokens_per_step", 0.0) * s.get("decode_steps", 0) for s in stats)
        drafted = sum(s.get("draft_tokens", 0) for s in stats)
        accepted = sum(s.get("accepted_draft_tokens", 0) for s in stats)
        return {"plugin": plugin, "decode_steps": steps, "draft_tokens": drafted, "accepted_draft_tokens": accepted,
                "mean_accepted_tokens_per_step": round(emitted / steps, 4) if steps else 0.0,
                "acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0, "choices": stats}

    @staticmethod
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

    @staticmethod
    def usage(prompt_lens: list[int], choices: list[ChoiceState]) -> UsageInfo:
        completion = sum(len(c.token_ids) for c in choices)
        cached = sum((c.stats or {}).get("cached_tokens", 0) for c in choices)   # a prompt's first sample's
        return UsageInfo(prompt_tokens=sum(prompt_lens), completion_tokens=completion,
                         total_tokens=sum(prompt_lens) + completion,
                         prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))

    @staticmethod
    def error_event(e: BaseException) -> str:
        return f"data: {error_for(e).response().model_dump_json()}\n\n"


def _plain_decoding(plugin_params: str | dict) -> bool:
    """{"plugin_type": "none"} (or its JSON string): plain decoding, as `--plugin none` is."""
    value = plugin_params
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return False                        # parse_plugin_params words the error
    kind = value.get("plugin_type") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind.strip().lower() != "none":
        return False
    if len(value) > 1:
        others = ", ".join(sorted(k for k in value if k != "plugin_type"))
        raise APIError(f"paraspec.plugin_params: plugin_type 'none' (plain decoding) takes no other keys; drop "
                       f"{others}", param="paraspec.plugin_params")
    return True


def error_for(e: BaseException) -> APIError:
    """Any exception -> the APIError a client sees (500 for bugs, without internals)."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ParaspecError):
        return APIError(str(e), param=e.param)
    if isinstance(e, RequestTimeoutError):
        return APIError(str(e), status=504, type="timeout_error", code="timeout")
    if isinstance(e, ShuttingDownError):
        return APIError(str(e), status=503, type="service_unavailable_error", code="shutting_down")
    if isinstance(e, EngineDeadError):
        return APIError(str(e), status=503, type="service_unavailable_error")
    if isinstance(e, EngineStepError):
        return APIError(str(e), status=500, type="internal_server_error", code="engine_step_failed")
    if isinstance(e, ServerBusyError):
        return APIError(str(e), status=503, type="service_unavailable_error", code="server_busy")
    return APIError("internal server error; the request was cancelled (see the server log)", status=500,
                    type="internal_server_error")


def unexpected(e: BaseException) -> bool:
    """Whether a handler logs e's traceback: a bug's, not an engine step's failure (logged once, with
    its cause, where it happened, however many requests it failed)."""
    return error_for(e).type == "internal_server_error" and not isinstance(e, EngineStepError)


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
    return {"step": t.step, "tokens": len(d.token_ids), "drafted": t.drafted, "accepted": t.accepted,
            "text": [t.text_from, t.own_from, t.text_to]}


def sse(chunk) -> str:
    return f"data: {chunk.model_dump_json()}\n\n"
