"""/v1/completions: validate the request, submit its prompts, and build the whole response or an
async generator of SSE chunks (one per accepted run of tokens)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import AsyncIterator

from .engine_client import EngineStream
from .protocol import (
    CompletionRequest,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    random_id,
)
from .api_errors import APIError, unexpected
from .serving import OpenAIServing
from .serving_outputs import (
    ChoiceState,
    chunk_extension,
    error_event,
    merge_streams,
    paraspec_stats,
    sse,
    usage,
)
from .structured_request import asked, constrain

logger = logging.getLogger("paraspec.server")

OPENAI_DEFAULT_MAX_TOKENS = 16  # completions only; chat defaults to the room left in the context


class OpenAIServingCompletion(OpenAIServing):
    async def create_completion(
        self, req: CompletionRequest
    ) -> CompletionResponse | AsyncIterator[str]:
        self.check_common(req)
        if req.suffix:
            raise APIError("suffix is not supported; leave it out", param="suffix")
        if req.best_of is not None and req.best_of != (req.n or 1):
            raise APIError(
                "best_of is not supported (other than best_of = n); leave it out", param="best_of"
            )
        if req.echo and req.logprobs is not None:
            raise APIError(
                "echo with logprobs is not supported (no prompt log-probabilities); drop one",
                param="echo",
            )
        texts, prompts = await self._prompts(req.prompt)
        params = [
            req.to_sampling_params(
                self.max_tokens(req.max_tokens, len(p), OPENAI_DEFAULT_MAX_TOKENS)
            )
            for p in prompts
        ]
        structured, param = asked(req)  # response_format or paraspec.grammar
        if structured is not None:
            params = [
                await constrain(p, structured, param, self.tokenizer, self.vocab_size)
                for p in params
            ]
        plugin, plugin_name = self.plugin_spec(req)
        request_id = random_id("cmpl")
        streams = self.submit(request_id, prompts, params, plugin)
        n = params[0].n
        echo = [t if req.echo else "" for t in texts]
        if req.stream:
            return self._stream(
                req, request_id, streams, n, echo, [len(p) for p in prompts], plugin_name
            )
        choices = [ChoiceState() for _ in range(len(prompts) * n)]
        try:
            async with contextlib.aclosing(merge_streams(streams)) as deltas:
                async for pi, d in deltas:
                    choices[pi * n + d.index].add(d)
        finally:
            for s in streams:
                s.close()
        out = []
        for i, c in enumerate(choices):
            prefix = echo[i // n]
            lp = self.completion_logprobs(c.logprobs, 0) if req.logprobs is not None else None
            out.append(
                CompletionResponseChoice(
                    index=i,
                    text=prefix + "".join(c.text),
                    logprobs=lp,
                    finish_reason=c.finish_reason,
                )
            )
        return CompletionResponse(
            id=request_id,
            model=self.model_name,
            choices=out,
            usage=usage([len(p) for p in prompts], choices),
            paraspec=paraspec_stats(plugin_name, choices),
        )

    async def _prompts(self, prompt) -> tuple[list[str], list[list[int]]]:
        """The prompt field (text, texts, token ids, lists of token ids) -> (texts, checked token ids)."""
        if isinstance(prompt, str):
            items: list = [prompt]
        elif prompt and all(isinstance(t, int) for t in prompt):
            items = [list(prompt)]
        else:
            items = list(prompt)
        if not items:
            raise APIError(
                "prompt is empty; send a string, a list of strings or token ids", param="prompt"
            )
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

    async def _stream(
        self,
        req: CompletionRequest,
        request_id: str,
        streams: list[EngineStream],
        n: int,
        echo: list[str],
        prompt_lens: list[int],
        plugin_name: str | None,
    ) -> AsyncIterator[str]:
        created = int(time.time())
        choices = [ChoiceState() for _ in range(len(streams) * n)]
        offsets = [len(echo[i // n]) for i in range(len(choices))]
        trace = bool(req.paraspec and req.paraspec.stream_steps)
        try:
            async with contextlib.aclosing(merge_streams(streams)) as deltas:
                async for pi, d in deltas:
                    idx = pi * n + d.index
                    c = choices[idx]
                    text = d.text if c.started else echo[pi] + d.text
                    c.started = True
                    c.add(d, trace)
                    if not (text or d.finish_reason or (req.logprobs is not None and d.token_ids)):
                        continue  # text held back (a multi-byte character or a stop string may follow)
                    lp = None
                    if req.logprobs is not None and d.logprobs:
                        lp = self.completion_logprobs(d.logprobs, offsets[idx])
                        offsets[idx] += sum(len(t) for t in lp.tokens)
                    chunk = CompletionStreamResponse(
                        id=request_id,
                        created=created,
                        model=self.model_name,
                        choices=[
                            CompletionResponseStreamChoice(
                                index=idx, text=text, logprobs=lp, finish_reason=d.finish_reason
                            )
                        ],
                        paraspec=chunk_extension(c, d, idx, trace),
                    )
                    yield sse(chunk)
            if req.stream_options and req.stream_options.include_usage:
                yield sse(
                    CompletionStreamResponse(
                        id=request_id,
                        created=created,
                        model=self.model_name,
                        choices=[],
                        usage=usage(prompt_lens, choices),
                        paraspec=paraspec_stats(plugin_name, choices),
                    )
                )
        except Exception as e:
            if unexpected(e):
                logger.exception("completion stream %s failed", request_id)
            yield error_event(e)
        finally:
            for s in streams:
                s.close()
        yield "data: [DONE]\n\n"
