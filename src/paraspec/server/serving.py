"""Completion and chat handlers: validate a request, submit it to the AsyncEngine, and build either
the whole OpenAI response or an async generator of server-sent-event chunks.

Everything a client can get wrong is checked here, before anything reaches the engine, so it comes
back as HTTP 400 rather than as an error event inside a 200 stream. Each accepted run of tokens
arrives as one Delta and becomes one SSE chunk: parallel decoding streams in runs.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

from ..config import PluginConfig, parse_plugin_params
from ..engine import TokenLogprob
from ..errors import ParaspecError
from ..model.tokenizer import Tokenizer
from ..sampling.params import SamplingParams
from .async_engine import (DEFAULT, AsyncEngine, Delta, EngineDeadError, RequestStream, RequestTimeoutError,
                           ServerBusyError)
from .config import ServiceConfig
from .protocol import (ChatCompletionLogProb, ChatCompletionLogProbs, ChatCompletionLogProbsContent,
                       ChatCompletionRequest, ChatCompletionResponse, ChatCompletionResponseChoice,
                       ChatCompletionResponseStreamChoice, ChatCompletionStreamResponse, ChatMessage,
                       CompletionLogProbs, CompletionRequest, CompletionResponse, CompletionResponseChoice,
                       CompletionResponseStreamChoice, CompletionStreamResponse, DeltaMessage, ErrorInfo,
                       ErrorResponse, UsageInfo, random_id)

logger = logging.getLogger("paraspec.server")

OPENAI_DEFAULT_MAX_TOKENS = 16      # completions only; chat defaults to the room left in the context
MIN_LOGPROB = -9999.0               # JSON has no -inf
BIG_PROMPT_CHARS = 100_000          # tokenised off the event loop above this


class APIError(Exception):
    """An error with its HTTP status and OpenAI error fields; app.py renders it."""

    def __init__(self, message: str, status: int = 400, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.type, self.param, self.code = status, type, param, code

    def response(self) -> ErrorResponse:
        return ErrorResponse(error=ErrorInfo(message=str(self), type=self.type, param=self.param, code=self.code))


@dataclass
class _Choice:
    """One output being assembled (index = prompt index * n + sample index)."""

    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    stats: dict | None = None
    started: bool = False


class OpenAIServing:
    """What both endpoints share: the model check, limits, plugin overrides, submission, logprobs."""

    def __init__(self, engine: AsyncEngine, tokenizer: Tokenizer, config: ServiceConfig, *, model_name: str,
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

    def plugin_spec(self, req: CompletionRequest | ChatCompletionRequest) -> tuple[Any, str | None]:
        """The drafter for this request: the server's, or `paraspec.plugin_params` validated against
        the server's speculationGamma. Returns (spec for AsyncEngine.add, plugin name for stats)."""
        opts = req.paraspec
        if opts is None or "plugin_params" not in opts.model_fields_set:
            return DEFAULT, getattr(self.engine.engine.default_drafter, "name", None)
        value = opts.plugin_params
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")) or value == {}:
            return None, None
        try:
            plugin = parse_plugin_params(value, self.config.model_deploy.speculation_gamma)
        except ParaspecError as e:
            raise APIError(f"paraspec.{e} (this server's speculationGamma is "
                           f"{self.config.model_deploy.speculation_gamma})", param="paraspec.plugin_params") from None
        return plugin, plugin.plugin_type

    async def encode(self, text: str) -> list[int]:
        if len(text) > BIG_PROMPT_CHARS:
            return await asyncio.to_thread(self.tokenizer.encode, text)
        return self.tokenizer.encode(text)

    # ---------------------------------------------------------------- engine

    def submit(self, request_id: str, prompts: list[list[int]], params: list[SamplingParams],
               plugin: str | PluginConfig | None) -> list[RequestStream]:
        self.engine.check_capacity(len(prompts))
        ids = [request_id] if len(prompts) == 1 else [f"{request_id}-{i}" for i in range(len(prompts))]
        streams: list[RequestStream] = []
        try:
            for rid, p, sp in zip(ids, prompts, params):
                streams.append(self.engine.add(p, sp, rid, plugin))
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
    def paraspec_stats(plugin: str | None, choices: list[_Choice]) -> dict:
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
    def usage(prompt_lens: list[int], choices: list[_Choice]) -> UsageInfo:
        completion = sum(len(c.token_ids) for c in choices)
        return UsageInfo(prompt_tokens=sum(prompt_lens), completion_tokens=completion,
                         total_tokens=sum(prompt_lens) + completion)

    @staticmethod
    def error_event(e: BaseException) -> str:
        return f"data: {error_for(e).response().model_dump_json()}\n\n"


def error_for(e: BaseException) -> APIError:
    """Any exception -> the APIError a client sees (500 for bugs, without internals)."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ParaspecError):
        return APIError(str(e), param=e.param)
    if isinstance(e, RequestTimeoutError):
        return APIError(str(e), status=504, type="timeout_error", code="timeout")
    if isinstance(e, EngineDeadError):
        return APIError(str(e), status=503, type="service_unavailable_error")
    if isinstance(e, ServerBusyError):
        return APIError(str(e), status=503, type="service_unavailable_error", code="server_busy")
    return APIError("internal server error; the request was cancelled (see the server log)", status=500,
                    type="internal_server_error")


async def merge_streams(streams: list[RequestStream]) -> AsyncIterator[tuple[int, Delta]]:
    """Deltas of several requests as they arrive, tagged with the request's position."""
    if len(streams) == 1:
        async for d in streams[0]:
            yield 0, d
        return
    q: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, s: RequestStream) -> None:
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


def _sse(chunk) -> str:
    return f"data: {chunk.model_dump_json()}\n\n"


# ====================================================================================== completions

class OpenAIServingCompletion(OpenAIServing):
    async def create_completion(self, req: CompletionRequest) -> CompletionResponse | AsyncIterator[str]:
        self.check_common(req)
        if req.suffix:
            raise APIError("suffix is not supported; leave it out", param="suffix")
        if req.best_of is not None and req.best_of != (req.n or 1):
            raise APIError("best_of is not supported (other than best_of = n); leave it out", param="best_of")
        if req.echo and req.logprobs is not None:
            raise APIError("echo with logprobs is not supported (no prompt log-probabilities); drop one",
                           param="echo")
        texts, prompts = await self._prompts(req.prompt)
        params = [req.to_sampling_params(self.max_tokens(req.max_tokens, len(p), OPENAI_DEFAULT_MAX_TOKENS))
                  for p in prompts]
        plugin, plugin_name = self.plugin_spec(req)
        request_id = random_id("cmpl")
        streams = self.submit(request_id, prompts, params, plugin)
        n = params[0].n
        echo = [t if req.echo else "" for t in texts]
        if req.stream:
            return self._stream(req, request_id, streams, n, echo, [len(p) for p in prompts], plugin_name)
        choices = [_Choice() for _ in range(len(prompts) * n)]
        try:
            async with contextlib.aclosing(merge_streams(streams)) as deltas:
                async for pi, d in deltas:
                    _accumulate(choices[pi * n + d.index], d)
        finally:
            for s in streams:
                s.close()
        out = []
        for i, c in enumerate(choices):
            prefix = echo[i // n]
            lp = self.completion_logprobs(c.logprobs, 0) if req.logprobs is not None else None
            out.append(CompletionResponseChoice(index=i, text=prefix + "".join(c.text), logprobs=lp,
                                                finish_reason=c.finish_reason))
        return CompletionResponse(id=request_id, model=self.model_name, choices=out,
                                  usage=self.usage([len(p) for p in prompts], choices),
                                  paraspec=self.paraspec_stats(plugin_name, choices))

    async def _prompts(self, prompt) -> tuple[list[str], list[list[int]]]:
        """The prompt field (text, texts, token ids, lists of token ids) -> (texts, checked token ids)."""
        if isinstance(prompt, str):
            items: list = [prompt]
        elif prompt and all(isinstance(t, int) for t in prompt):
            items = [list(prompt)]
        else:
            items = list(prompt)
        if not items:
            raise APIError("prompt is empty; send a string, a list of strings or token ids", param="prompt")
        texts, prompts = [], []
        for item in items:
            if isinstance(item, str):
                texts.append(item)
                prompts.append(self.check_prompt(await self.encode(item), "prompt"))
            else:
                ids = self.check_prompt(list(item), "prompt")
                texts.append(self.tokenizer.decode(ids))
                prompts.append(ids)
        return texts, prompts

    async def _stream(self, req: CompletionRequest, request_id: str, streams: list[RequestStream], n: int,
                      echo: list[str], prompt_lens: list[int], plugin_name: str | None) -> AsyncIterator[str]:
        created = int(time.time())
        choices = [_Choice() for _ in range(len(streams) * n)]
        offsets = [len(echo[i // n]) for i in range(len(choices))]
        try:
            async with contextlib.aclosing(merge_streams(streams)) as deltas:
                async for pi, d in deltas:
                    idx = pi * n + d.index
                    c = choices[idx]
                    text = d.text if c.started else echo[pi] + d.text
                    c.started = True
                    _accumulate(c, d)
                    if not (text or d.finish_reason or (req.logprobs is not None and d.token_ids)):
                        continue        # text held back (a multi-byte character or a stop string may follow)
                    lp = None
                    if req.logprobs is not None and d.logprobs:
                        lp = self.completion_logprobs(d.logprobs, offsets[idx])
                        offsets[idx] += sum(len(t) for t in lp.tokens)
                    chunk = CompletionStreamResponse(
                        id=request_id, created=created, model=self.model_name,
                        choices=[CompletionResponseStreamChoice(index=idx, text=text, logprobs=lp,
                                                                finish_reason=d.finish_reason)],
                        paraspec={"index": idx, **d.stats} if d.stats else None)
                    yield _sse(chunk)
            if req.stream_options and req.stream_options.include_usage:
                yield _sse(CompletionStreamResponse(id=request_id, created=created, model=self.model_name,
                                                    choices=[], usage=self.usage(prompt_lens, choices),
                                                    paraspec=self.paraspec_stats(plugin_name, choices)))
        except Exception as e:
            if error_for(e).type == "internal_server_error":
                logger.exception("completion stream %s failed", request_id)
            yield self.error_event(e)
        finally:
            for s in streams:
                s.close()
        yield "data: [DONE]\n\n"


# ====================================================================================== chat

class OpenAIServingChat(OpenAIServing):
    async def create_chat_completion(self, req: ChatCompletionRequest) -> ChatCompletionResponse | AsyncIterator[str]:
        self.check_common(req)
        if req.tools:
            raise APIError("tools are not supported; leave them out", param="tools")
        if req.response_format and req.response_format.get("type", "text") != "text":
            raise APIError("response_format other than {\"type\": \"text\"} is not supported",
                           param="response_format")
        if req.top_logprobs is not None and not req.logprobs:
            raise APIError("top_logprobs needs logprobs=true", param="top_logprobs")
        prompt = self.check_prompt(await self._render(req), "messages")
        requested = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        params = req.to_sampling_params(self.max_tokens(requested, len(prompt), None))
        plugin, plugin_name = self.plugin_spec(req)
        request_id = random_id("chatcmpl")
        streams = self.submit(request_id, [prompt], [params], plugin)
        if req.stream:
            return self._stream(req, request_id, streams[0], params.n, len(prompt), plugin_name)
        choices = [_Choice() for _ in range(params.n)]
        try:
            async for d in streams[0]:
                _accumulate(choices[d.index], d)
        finally:
            streams[0].close()
        out = [ChatCompletionResponseChoice(
            index=i, message=ChatMessage(role="assistant", content="".join(c.text)),
            logprobs=self.chat_logprobs(c.logprobs) if req.logprobs else None, finish_reason=c.finish_reason)
            for i, c in enumerate(choices)]
        return ChatCompletionResponse(id=request_id, model=self.model_name, choices=out,
                                      usage=self.usage([len(prompt)], choices),
                                      paraspec=self.paraspec_stats(plugin_name, choices))

    async def _render(self, req: ChatCompletionRequest) -> list[int]:
        """messages -> the model's chat template -> token ids."""
        messages = []
        for i, m in enumerate(req.messages):
            content = m.content
            if isinstance(content, list):           # content parts: text only
                texts = []
                for part in content:
                    if part.get("type") != "text" or not isinstance(part.get("text"), str):
                        raise APIError(f"messages[{i}].content: only text parts are supported",
                                       param=f"messages[{i}].content")
                    texts.append(part["text"])
                content = "".join(texts)
            messages.append({"role": m.role, "content": content or ""})
        from jinja2 import TemplateError
        try:
            if sum(len(m["content"]) for m in messages) > BIG_PROMPT_CHARS:
                return await asyncio.to_thread(self.tokenizer.encode_chat, messages)
            return self.tokenizer.encode_chat(messages)
        except TemplateError as e:
            raise APIError(f"the chat template could not render the messages: {e}", param="messages") from None

    async def _stream(self, req: ChatCompletionRequest, request_id: str, stream: RequestStream, n: int,
                      prompt_len: int, plugin_name: str | None) -> AsyncIterator[str]:
        created = int(time.time())
        choices = [_Choice() for _ in range(n)]

        def chunk(choices: list[ChatCompletionResponseStreamChoice], **kw) -> str:
            return _sse(ChatCompletionStreamResponse(id=request_id, created=created, model=self.model_name,
                                                     choices=choices, **kw))

        try:
            for i in range(n):                      # the role first, as OpenAI does
                yield chunk([ChatCompletionResponseStreamChoice(index=i, delta=DeltaMessage(role="assistant",
                                                                                           content=""))])
            async for d in stream:
                _accumulate(choices[d.index], d)
                if not (d.text or d.finish_reason or (req.logprobs and d.token_ids)):
                    continue        # text held back (a multi-byte character or a stop string may follow)
                lp = self.chat_logprobs(d.logprobs) if req.logprobs and d.logprobs else None
                delta = DeltaMessage(content=d.text or None)
                yield chunk([ChatCompletionResponseStreamChoice(index=d.index, delta=delta, logprobs=lp,
                                                                finish_reason=d.finish_reason)],
                            paraspec={"index": d.index, **d.stats} if d.stats else None)
            if req.stream_options and req.stream_options.include_usage:
                yield chunk([], usage=self.usage([prompt_len], choices),
                            paraspec=self.paraspec_stats(plugin_name, choices))
        except Exception as e:
            if error_for(e).type == "internal_server_error":
                logger.exception("chat stream %s failed", request_id)
            yield self.error_event(e)
        finally:
            stream.close()
        yield "data: [DONE]\n\n"


def _accumulate(c: _Choice, d: Delta) -> None:
    c.text.append(d.text)
    c.token_ids += d.token_ids
    if d.logprobs:
        c.logprobs += d.logprobs
    if d.finish_reason is not None:
        c.finish_reason, c.stats = d.finish_reason, d.stats

