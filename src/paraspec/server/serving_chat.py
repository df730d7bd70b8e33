"""/v1/chat/completions: validate the request, render the messages with the model's chat template,
submit, and build the whole response or an async generator of SSE chunks (the role first, then one
chunk per accepted run of tokens)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator

from ..errors import ParaspecError
from ..structured.params import StructuredOutputsParams
from .engine_client import EngineStream
from .protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
    DeltaMessage,
    random_id,
)
from .api_errors import APIError, error_for, unexpected
from .serving import BIG_PROMPT_CHARS, OpenAIServing
from .serving_outputs import ChoiceState, chunk_extension, error_event, paraspec_stats, sse, usage
from .structured_request import asked, constrain
from .tool_calls import (
    ToolCallStream,
    ToolPlan,
    call_grammar,
    check_history_calls,
    check_tools,
    parse_tool_calls,
    template_messages,
)

logger = logging.getLogger("paraspec.server")

# OpenAI's roles; "developer" is its newer name for "system", which is what chat templates know
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def _as_sent(e: APIError, req: ChatCompletionRequest) -> APIError:
    """An error about two chat fields, in the names the request used: the engine's logprobs is
    chat's top_logprobs, and its max_tokens may have come as max_completion_tokens."""
    completion_tokens = "max_completion_tokens" if req.max_completion_tokens is not None else None
    sent = {"logprobs": "top_logprobs", "max_tokens": completion_tokens}.get(e.param)
    if sent is None:
        return e
    return APIError(str(e).replace(f"{e.param}=", f"{sent}=", 1), e.status, e.type, sent, e.code)


class OpenAIServingChat(OpenAIServing):
    async def create_chat_completion(
        self, req: ChatCompletionRequest
    ) -> ChatCompletionResponse | AsyncIterator[str]:
        self.check_common(req)
        plan = check_tools(req.tools, req.tool_choice)
        if req.top_logprobs is not None and not req.logprobs:
            raise APIError("top_logprobs needs logprobs=true", param="top_logprobs")
        # response_format, paraspec.grammar, or the call format tool_choice "required" / a function asks for
        calls = call_grammar(plan)
        structured, param = asked(
            req, (StructuredOutputsParams(grammar=calls) if calls else None, "tools")
        )
        try:
            prompt = self.check_prompt(await self._render(req, plan), "messages")
        except APIError as e:
            if e.code != "context_length_exceeded" or not (plan.parse and plan.tools):
                raise  # (else the tools are in the prompt too: say so)
            raise APIError(
                str(e).replace(
                    "the prompt", "the prompt (the messages and the tools' definitions)", 1
                ),
                e.status,
                e.type,
                e.param,
                e.code,
            ) from None
        requested = (
            req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        )
        try:
            params = req.to_sampling_params(self.max_tokens(requested, len(prompt), None))
        except (APIError, ParaspecError) as e:
            raise _as_sent(error_for(e), req) from None
        if structured is not None:
            params = await constrain(params, structured, param, self.tokenizer, self.vocab_size)
        plugin, plugin_name = self.plugin_spec(req)
        request_id = random_id("chatcmpl")
        streams = self.submit(request_id, [prompt], [params], plugin)
        if req.stream:
            return self._stream(
                req, request_id, streams[0], params.n, len(prompt), plugin_name, plan
            )
        choices = [ChoiceState() for _ in range(params.n)]
        try:
            async for d in streams[0]:
                choices[d.index].add(d)
        finally:
            streams[0].close()
        out = []
        for i, c in enumerate(choices):
            content, calls = "".join(c.text), []
            if plan.parse:
                content, calls = parse_tool_calls(content, plan)
            finish = "tool_calls" if calls and c.finish_reason == "stop" else c.finish_reason
            out.append(
                ChatCompletionResponseChoice(
                    index=i,
                    message=ChatMessage(
                        role="assistant", content=content, tool_calls=calls or None
                    ),
                    logprobs=self.chat_logprobs(c.logprobs) if req.logprobs else None,
                    finish_reason=finish,
                )
            )
        return ChatCompletionResponse(
            id=request_id,
            model=self.model_name,
            choices=out,
            usage=usage([len(prompt)], choices),
            paraspec=paraspec_stats(plugin_name, choices),
        )

    async def _render(self, req: ChatCompletionRequest, plan: ToolPlan) -> list[int]:
        """messages (and tools) -> the model's chat template -> token ids."""
        messages = []
        for i, m in enumerate(req.messages):
            role = ROLES.get(m.role)
            if role is None:
                raise APIError(
                    f"messages[{i}].role={m.role!r} is not one of "
                    f"{', '.join(repr(r) for r in ROLES)}",
                    param=f"messages[{i}].role",
                )
            if m.tool_calls is not None:
                if role != "assistant":
                    raise APIError(
                        f"messages[{i}].tool_calls is only allowed on assistant messages",
                        param=f"messages[{i}].tool_calls",
                    )
                check_history_calls(m.tool_calls, f"messages[{i}].tool_calls")
            content = m.content
            if isinstance(content, list):  # content parts: text only
                texts = []
                for part in content:
                    if part.get("type") != "text" or not isinstance(part.get("text"), str):
                        raise APIError(
                            f"messages[{i}].content: only text parts are supported",
                            param=f"messages[{i}].content",
                        )
                    texts.append(part["text"])
                content = "".join(texts)
            messages.append(
                {"role": role, "content": content or ""}
                | {
                    k: v
                    for k in ("tool_calls", "tool_call_id", "name")
                    if (v := getattr(m, k)) is not None
                }
            )
        from jinja2 import TemplateError

        self.fit_text("".join(m["content"] for m in messages), "messages")  # before any templating
        messages, tools = template_messages(messages, plan, self.tokenizer.template_takes_tools)
        try:
            if sum(len(m["content"]) for m in messages) > BIG_PROMPT_CHARS:
                text = await asyncio.to_thread(
                    self.tokenizer.apply_chat_template, messages, True, tools
                )
            else:
                text = self.tokenizer.apply_chat_template(messages, tools=tools)
        except TemplateError as e:
            raise APIError(
                f"the chat template could not render the messages: {e}", param="messages"
            ) from None
        return await self.encode(text, "messages", add_bos=self.tokenizer.chat_add_bos(text))

    async def _stream(
        self,
        req: ChatCompletionRequest,
        request_id: str,
        stream: EngineStream,
        n: int,
        prompt_len: int,
        plugin_name: str | None,
        plan: ToolPlan,
    ) -> AsyncIterator[str]:
        created = int(time.time())
        choices = [ChoiceState() for _ in range(n)]
        trace = bool(req.paraspec and req.paraspec.stream_steps)
        calls = [ToolCallStream(plan) if plan.parse else None for _ in range(n)]

        def chunk(choices: list[ChatCompletionResponseStreamChoice], **kw) -> str:
            return sse(
                ChatCompletionStreamResponse(
                    id=request_id, created=created, model=self.model_name, choices=choices, **kw
                )
            )

        try:
            for i in range(n):  # the role first, as OpenAI does
                yield chunk(
                    [
                        ChatCompletionResponseStreamChoice(
                            index=i, delta=DeltaMessage(role="assistant", content="")
                        )
                    ]
                )
            async for d in stream:
                c, parser = choices[d.index], calls[d.index]
                c.add(d, trace)
                text, found, finish = d.text, [], d.finish_reason
                if parser is not None:  # text that may open a tool call is held until it is known
                    text, found = parser.push(d.text)
                    text += parser.flush() if finish else ""
                    finish = "tool_calls" if finish == "stop" and parser.calls else finish
                if not (text or found or finish or (req.logprobs and d.token_ids)):
                    continue  # text held back (a multi-byte character or a stop string may follow)
                lp = self.chat_logprobs(d.logprobs) if req.logprobs and d.logprobs else None
                delta = DeltaMessage(content=text or None, tool_calls=found or None)
                yield chunk(
                    [
                        ChatCompletionResponseStreamChoice(
                            index=d.index, delta=delta, logprobs=lp, finish_reason=finish
                        )
                    ],
                    paraspec=chunk_extension(c, d, d.index, trace),
                )
            if req.stream_options and req.stream_options.include_usage:
                yield chunk(
                    [],
                    usage=usage([prompt_len], choices),
                    paraspec=paraspec_stats(plugin_name, choices),
                )
        except Exception as e:
            if unexpected(e):
                logger.exception("chat stream %s failed", request_id)
            yield error_event(e)
        finally:
            stream.close()
        yield "data: [DONE]\n\n"
