"""OpenAI wire schemas (pydantic), in the spec's field order, plus paraspec's extras.

Requests know how to become engine parameters (`to_sampling_params`); nothing here calls the engine.
Extras beyond the OpenAI spec: vLLM's sampling fields (top_k, min_p, repetition_penalty,
stop_token_ids, ignore_eos, ...) and `paraspec: {"plugin_params": ..., "stream_steps": ...}`, a
per-request choice of parallel decoding and an opt-in trace of its steps on stream chunks.
Responses carry `paraspec`: the request's decoding statistics (serving_outputs.py: step_entry).
Ranges are checked once, by SamplingParams; pydantic only checks JSON types.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from ..sampling.params import SamplingParams


def random_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class OpenAIBaseModel(BaseModel):
    # unknown request fields are ignored, as vLLM does: SDKs and proxies add their own
    model_config = ConfigDict(extra="ignore")


class _StrictRequest(OpenAIBaseModel):
    # a string is not a number and "yes" is not true: "max_tokens": "4" is a 400 naming the field
    model_config = ConfigDict(extra="ignore", strict=True)


# ------------------------------------------------------------------------------------ shared


class ErrorInfo(OpenAIBaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(OpenAIBaseModel):
    error: ErrorInfo


class PromptTokensDetails(OpenAIBaseModel):
    cached_tokens: int = 0  # prompt tokens whose KV the prefix cache gave (prefix_cache.py)


class UsageInfo(OpenAIBaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class StreamOptions(_StrictRequest):
    include_usage: bool = False


class ParaspecOptions(OpenAIBaseModel):
    plugin_params: str | dict | None = Field(
        None,
        description="MindIE plugin_params for this request only (JSON string or object); "
        'null, "", "none" or {} = plain decoding. Checked against speculationGamma.',
    )
    stream_steps: bool = Field(
        False,
        strict=True,
        description="with stream=true: each chunk's `paraspec.steps` lists the decode steps whose text it "
        "carries (step, tokens, drafted, accepted, text offsets); off, chunks are plain OpenAI",
    )
    grammar: dict[str, Any] | None = Field(
        None,
        description='the output obeys a grammar: {"regex": ...}, {"lark": ...}, {"gbnf": ...} or '
        '{"choice": [...]} (structured_request.py)',
    )


class ModelCard(OpenAIBaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "paraspec"
    max_model_len: int | None = None


class ModelList(OpenAIBaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(default_factory=list)


class _GenerationRequest(_StrictRequest):
    """Fields both endpoints share, OpenAI's first, then vLLM's and paraspec's extras."""

    model: str | None = None
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    max_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    # vLLM extras
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    # paraspec extra
    paraspec: ParaspecOptions | None = None

    def _sampling_params(self, max_tokens: int, logprobs: int | None) -> SamplingParams:
        # stop "" is [""], refused alike (an empty stop string would end every output at its start)
        return SamplingParams(
            n=1 if self.n is None else self.n,
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_k=self.top_k or 0,
            top_p=1.0 if self.top_p is None else self.top_p,
            min_p=self.min_p or 0.0,
            seed=self.seed,
            repetition_penalty=1.0 if self.repetition_penalty is None else self.repetition_penalty,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            stop=[] if self.stop is None else self.stop,
            stop_token_ids=self.stop_token_ids or [],
            ignore_eos=self.ignore_eos,
            include_stop_str_in_output=self.include_stop_str_in_output,
            logprobs=logprobs,
            skip_special_tokens=self.skip_special_tokens,
        )


# ------------------------------------------------------------------------------------ completions


class CompletionRequest(_GenerationRequest):
    prompt: str | list[str] | list[int] | list[list[int]]
    best_of: int | None = None
    echo: bool | None = False
    logprobs: int | None = None
    suffix: str | None = None
    response_format: dict[str, Any] | None = None  # vLLM's extra: as in chat

    def to_sampling_params(self, max_tokens: int) -> SamplingParams:
        return self._sampling_params(max_tokens, self.logprobs)


class CompletionLogProbs(OpenAIBaseModel):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class _Choice(OpenAIBaseModel):
    index: int
    finish_reason: str | None = None


ChoiceT = TypeVar("ChoiceT", bound=_Choice)


class _Response(OpenAIBaseModel, Generic[ChoiceT]):
    """What every response and stream chunk carries (``paraspec``: this engine's extension)."""

    id: str
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChoiceT]
    usage: UsageInfo | None = None
    paraspec: dict[str, Any] | None = None


class CompletionResponseChoice(_Choice):
    text: str
    logprobs: CompletionLogProbs | None = None


CompletionResponseStreamChoice = CompletionResponseChoice


class CompletionResponse(_Response[CompletionResponseChoice]):
    object: Literal["text_completion"] = "text_completion"
    usage: UsageInfo


class CompletionStreamResponse(_Response[CompletionResponseStreamChoice]):
    object: Literal["text_completion"] = "text_completion"


# ------------------------------------------------------------------------------------ chat


class ChatMessageParam(_StrictRequest):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # an assistant turn's calls (tool_calls.py)
    tool_call_id: str | None = None  # a tool turn's answer to that call


class ChatCompletionRequest(_GenerationRequest):
    messages: list[ChatMessageParam] = Field(min_length=1)
    logprobs: bool | None = False
    top_logprobs: int | None = None
    max_completion_tokens: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None

    def to_sampling_params(self, max_tokens: int) -> SamplingParams:
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        return self._sampling_params(max_tokens, logprobs)


class ChatMessage(OpenAIBaseModel):
    role: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatCompletionLogProb(OpenAIBaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    top_logprobs: list[ChatCompletionLogProb] = Field(default_factory=list)


class ChatCompletionLogProbs(OpenAIBaseModel):
    content: list[ChatCompletionLogProbsContent] | None = None


class ChatCompletionResponseChoice(_Choice):
    message: ChatMessage
    logprobs: ChatCompletionLogProbs | None = None


class ChatCompletionResponse(_Response[ChatCompletionResponseChoice]):
    object: Literal["chat.completion"] = "chat.completion"
    usage: UsageInfo


class DeltaMessage(OpenAIBaseModel):
    role: str | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None

    @model_serializer(mode="wrap")
    def _drop_nulls(self, handler) -> dict:
        # OpenAI sends only what changed: {"role": ...} first, then {"content": ...}, {} at the end
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatCompletionResponseStreamChoice(_Choice):
    delta: DeltaMessage
    logprobs: ChatCompletionLogProbs | None = None


class ChatCompletionStreamResponse(_Response[ChatCompletionResponseStreamChoice]):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
