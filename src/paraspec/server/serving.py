"""What the completion and chat handlers share: validation of everything a client can get wrong,
limits, per-request plugin overrides, submission to the EngineClient and logprobs (api_errors.py:
the errors; serving_outputs.py: usage, stats and stream chunks; serving_completion.py and
serving_chat.py build the responses).

Everything a client can get wrong is checked before anything reaches the engine, so it comes back
as HTTP 400 rather than as an error event inside a 200 stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Sequence

from ..config import PluginConfig, parse_plugin_params
from ..decoding.drafters.draft_head import AUTO as AUTO_HEAD
from ..errors import ParaspecError
from ..model.tokenizer import Tokenizer
from ..outputs import TokenLogprob
from ..sampling.params import SamplingParams
from .api_errors import APIError
from .config import ServiceConfig
from .engine_client import DEFAULT, EngineClient, EngineStream
from .protocol import (
    ChatCompletionLogProb,
    ChatCompletionLogProbs,
    ChatCompletionLogProbsContent,
    ChatCompletionRequest,
    CompletionLogProbs,
    CompletionRequest,
)

logger = logging.getLogger("paraspec.server")

MIN_LOGPROB = -9999.0  # JSON has no -inf
BIG_PROMPT_CHARS = 20_000  # tokenised off the event loop above this


class OpenAIServing:
    """What both endpoints share: the model check, limits, plugin overrides, submission, logprobs."""

    def __init__(
        self,
        engine: EngineClient,
        tokenizer: Tokenizer,
        config: ServiceConfig,
        *,
        model_name: str,
        vocab_size: int,
        model_max_len: int,
    ):
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
            raise APIError(
                f"the model {model!r} does not exist; this server serves {self.model_name!r} "
                "(see GET /v1/models)",
                param="model",
                code="model_not_found",
            )

    def check_prompt(self, ids: list[int], param: str) -> list[int]:
        if not ids:
            raise APIError("the prompt is empty; send at least one token of text", param=param)
        if len(ids) > self.max_input_len:
            if self.config.model_deploy.truncation:
                ids = ids[-self.max_input_len :]  # MindIE's truncation keeps the end
            else:
                raise APIError(
                    f"the prompt has {len(ids)} tokens, more than this server's limit of "
                    f"{self.max_input_len} (maxInputTokenLen); shorten it",
                    param=param,
                    code="context_length_exceeded",
                )
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise APIError(
                f"token id {bad} is outside the vocabulary [0, {self.vocab_size})", param=param
            )
        return ids

    def max_tokens(self, requested: int | None, prompt_len: int, default: int | None) -> int:
        """The request's max_tokens, checked against maxIterTimes and the context left after the prompt."""
        room = self.max_seq_len - prompt_len
        if requested is None:
            return max(1, min(default or room, room, self.max_output))
        if not isinstance(requested, int) or requested < 1:
            return requested  # SamplingParams words this error
        if requested > self.max_output:
            raise APIError(
                f"max_tokens={requested} is above this server's limit of {self.max_output} tokens "
                "per request (maxIterTimes); ask for fewer",
                param="max_tokens",
            )
        if requested > room:
            raise APIError(
                f"this model's maximum context length is {self.max_seq_len} tokens, but {prompt_len} "
                f"prompt tokens + max_tokens={requested} = {prompt_len + requested}; shorten the prompt "
                "or lower max_tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return requested

    def check_common(self, req: CompletionRequest | ChatCompletionRequest) -> None:
        self.check_model(req.model)
        if req.logit_bias:
            raise APIError("logit_bias is not supported; leave it out", param="logit_bias")
        if req.stream_options is not None and not req.stream:
            raise APIError(
                "stream_options is only allowed with stream=true", param="stream_options"
            )
        if req.paraspec is not None and req.paraspec.stream_steps and not req.stream:
            raise APIError(
                "paraspec.stream_steps is only allowed with stream=true",
                param="paraspec.stream_steps",
            )
        for i, stop in enumerate([req.stop] if isinstance(req.stop, str) else req.stop or []):
            try:
                stop.encode("utf-8")
            except UnicodeEncodeError as e:  # as in messages: not text a model can write
                where = "stop" if isinstance(req.stop, str) else f"stop[{i}]"
                raise APIError(
                    f"{where} holds an invalid Unicode character {stop[e.start]!r} at offset "
                    f"{e.start} (a lone surrogate); send valid UTF-16 pairs or drop it",
                    param="stop",
                ) from None

    def plugin_spec(self, req: CompletionRequest | ChatCompletionRequest) -> tuple[Any, str | None]:
        """The drafter for this request: the server's, or `paraspec.plugin_params` validated against
        the server's speculationGamma. Returns (spec for AsyncEngine.add, plugin name for stats)."""
        opts = req.paraspec
        if opts is None or "plugin_params" not in opts.model_fields_set:
            return DEFAULT, self.engine.default_plugin
        value = opts.plugin_params
        if (
            value is None
            or (isinstance(value, str) and value.strip().lower() in ("", "none"))
            or value == {}
        ):
            return None, None
        if _plain_decoding(value):
            return None, None
        gamma = self.config.model_deploy.speculation_gamma
        try:
            plugin = parse_plugin_params(value, gamma)
        except ParaspecError as e:  # (a plugin's own checks name its keys "lookahead.level", ...)
            why = (
                f"paraspec.{e}"
                if str(e).startswith("plugin_params")
                else f"paraspec.plugin_params: {e}"
            )
            raise APIError(
                why
                + (f" (this server's speculationGamma is {gamma})" if gamma is not None else ""),
                param="paraspec.plugin_params",
            ) from None
        head = getattr(plugin.drafting.params, "draft_head", None)
        if head not in (None, AUTO_HEAD):
            # which files the server reads is the operator's choice, not a client's
            raise APIError(
                f"paraspec.plugin_params.draft_head={head!r}: a request may ask only for "
                f'"{AUTO_HEAD}" (the head trained for this model); other files are set in the '
                "server's config",
                param="paraspec.plugin_params",
            )
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
            return text[-2 * self.max_input_len * self.tokenizer.max_token_chars :]
        raise APIError(
            f"the prompt has {len(text)} characters, so at least {least} tokens, more than this "
            f"server's limit of {self.max_input_len} (maxInputTokenLen); shorten it",
            param=param,
            code="context_length_exceeded",
        )

    async def encode(
        self, text: str, param: str = "prompt", add_bos: bool | None = None
    ) -> list[int]:
        text = self.fit_text(text, param)
        try:
            # the tokenizer releases the GIL: the event loop runs on
            if len(text) > BIG_PROMPT_CHARS:
                return await asyncio.to_thread(self.tokenizer.encode, text, add_bos)
            return self.tokenizer.encode(text, add_bos)
        except ParaspecError as e:  # e.g. a lone surrogate: name the field
            raise APIError(str(e), param=param) from None

    # ---------------------------------------------------------------- engine

    def submit(
        self,
        request_id: str,
        prompts: list[list[int]],
        params: list[SamplingParams],
        plugin: str | PluginConfig | None,
    ) -> list[EngineStream]:
        self.engine.check_capacity(sum(sp.n for sp in params))
        ids = (
            [request_id]
            if len(prompts) == 1
            else [f"{request_id}-{i}" for i in range(len(prompts))]
        )
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
            text = self._token_text[token_id] = self.tokenizer.decode(
                [token_id], skip_special=False
            )
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
            return {
                "token": tok,
                "logprob": max(logprob, MIN_LOGPROB),
                "bytes": list(tok.encode("utf-8")),
            }

        return ChatCompletionLogProbs(
            content=[
                ChatCompletionLogProbsContent(
                    **entry(lp.token_id, lp.logprob),
                    top_logprobs=[ChatCompletionLogProb(**entry(t, v)) for t, v in lp.top],
                )
                for lp in lps
            ]
        )


def _plain_decoding(plugin_params: str | dict) -> bool:
    """{"plugin_type": "none"} (or its JSON string): plain decoding, as `--plugin none` is."""
    value = plugin_params
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return False  # parse_plugin_params words the error
    kind = value.get("plugin_type") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind.strip().lower() != "none":
        return False
    if len(value) > 1:
        others = ", ".join(sorted(k for k in value if k != "plugin_type"))
        raise APIError(
            f"paraspec.plugin_params: plugin_type 'none' (plain decoding) takes no other keys; drop "
            f"{others}",
            param="paraspec.plugin_params",
        )
    return True
