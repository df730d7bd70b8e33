"""/v1/responses: OpenAI's Responses API over the chat endpoint's engine path.

A request (input: a string or a list of messages; instructions; max_output_tokens; stream) becomes
the chat completion request it means (instructions as the system message first), so it is
validated, templated, scheduled, drafted and reported exactly as /v1/chat/completions is; the
answer comes back as a Response object (output: one assistant message of output_text), or as the
response.* SSE events (created, in_progress, output_item.added, content_part.added,
output_text.delta per accepted run, then the .done events and response.completed). The server
keeps no responses: previous_response_id, background and stored conversations are refused with a
400 naming the field, as are tools (this endpoint speaks text).
"""

from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator

from pydantic import ConfigDict, ValidationError

from .protocol import (
    ChatCompletionRequest,
    OpenAIBaseModel,
    ParaspecOptions,
    _StrictRequest,
    random_id,
)
from ..errors import ParaspecError
from .api_errors import APIError, error_for
from .serving_chat import OpenAIServingChat

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text")
RENAMED = {
    "messages": "input",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
}


class ResponsesRequest(_StrictRequest):
    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool | None = False
    previous_response_id: str | None = None
    background: bool | None = None
    tools: list[dict[str, Any]] | None = None
    text: dict[str, Any] | None = None
    store: bool | None = None  # accepted and ignored: nothing is stored either way
    metadata: dict[str, str] | None = None
    user: str | None = None
    paraspec: ParaspecOptions | None = None


class ResponseObject(OpenAIBaseModel):
    """A Response object as built by OpenAIServingResponses._response (its fields kept as they are)."""

    model_config = ConfigDict(extra="allow")


class ResponsesUsage(OpenAIBaseModel):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


def _content(item: dict, i: int) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(
            f"input[{i}].content must be a string or a list of input_text parts",
            param=f"input[{i}].content",
        )
    texts = []
    for j, part in enumerate(content):
        if (
            not isinstance(part, dict)
            or part.get("type") not in TEXT_PARTS
            or not isinstance(part.get("text"), str)
        ):
            raise APIError(
                f"input[{i}].content[{j}]: only text parts (input_text, output_text) are supported",
                param=f"input[{i}].content[{j}]",
            )
        texts.append(part["text"])
    return "".join(texts)


def chat_messages(req: ResponsesRequest) -> list[dict[str, str]]:
    """The request's conversation as chat messages, instructions first."""
    messages = [{"role": "system", "content": req.instructions}] if req.instructions else []
    if isinstance(req.input, str):
        return messages + [{"role": "user", "content": req.input}]
    if not req.input:
        raise APIError("input is empty; send a string or at least one message", param="input")
    for i, item in enumerate(req.input):
        if item.get("type", "message") != "message":
            raise APIError(
                f"input[{i}].type={item.get('type')!r} is not supported; send messages "
                '({"role": "user", "content": "..."})',
                param=f"input[{i}].type",
            )
        role = ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
        if role is None:
            raise APIError(
                f"input[{i}].role={item.get('role')!r} is not one of user, assistant, system, developer",
                param=f"input[{i}].role",
            )
        messages.append({"role": role, "content": _content(item, i)})
    return messages


class OpenAIServingResponses:
    def __init__(self, chat: OpenAIServingChat):
        self.chat = chat

    def _check(self, req: ResponsesRequest) -> None:
        for field, why in (
            (
                "previous_response_id",
                "this server stores no responses; send the whole conversation in input",
            ),
            ("background", "responses run in the foreground; leave it out"),
        ):
            if getattr(req, field):
                raise APIError(f"{field} is not supported: {why}", param=field)
        if req.tools:
            raise APIError(
                "tools are not supported on /v1/responses; use /v1/chat/completions", param="tools"
            )
        fmt = (req.text or {}).get("format", {"type": "text"})
        if not isinstance(fmt, dict) or fmt.get("type", "text") != "text":
            raise APIError(
                'text.format other than {"type": "text"} is not supported here; use '
                "/v1/chat/completions' response_format",
                param="text.format",
            )

    def _chat_request(self, req: ResponsesRequest) -> ChatCompletionRequest:
        body: dict[str, Any] = {
            "model": req.model,
            "messages": chat_messages(req),
            "stream": bool(req.stream),
            "max_completion_tokens": req.max_output_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "user": req.user,
        }
        if req.stream:
            body["stream_options"] = {"include_usage": True}
        if req.paraspec is not None:
            body["paraspec"] = req.paraspec.model_dump(exclude_unset=True)
        try:
            return ChatCompletionRequest.model_validate(body)
        except ValidationError as e:
            err = e.errors()[0]
            raise APIError(
                f"{'.'.join(map(str, err['loc']))}: {err['msg']}", param="input"
            ) from None

    def _response(
        self,
        req: ResponsesRequest,
        rid: str,
        created: int,
        text: str,
        finish: str | None,
        usage: dict | None,
        stats: dict | None,
        status: str | None = None,
    ) -> dict:
        status = status or ("incomplete" if finish == "length" else "completed")
        item = {
            "type": "message",
            "id": f"msg_{rid[5:]}",
            "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
        }
        out = {
            "id": rid,
            "object": "response",
            "created_at": created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.chat.model_name,
            "output": [item] if status != "in_progress" else [],
            "parallel_tool_calls": False,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "tool_choice": "none",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "metadata": req.metadata or {},
            "usage": None,
            "paraspec": stats,
        }
        if usage is not None:
            details = usage.get("prompt_tokens_details") or {}
            out["usage"] = ResponsesUsage(
                input_tokens=usage["prompt_tokens"],
                input_tokens_details={"cached_tokens": details.get("cached_tokens", 0)},
                output_tokens=usage["completion_tokens"],
                output_tokens_details={"reasoning_tokens": 0},
                total_tokens=usage["total_tokens"],
            ).model_dump()
        return out

    async def create_response(self, req: ResponsesRequest) -> ResponseObject | AsyncIterator[str]:
        self._check(req)
        chat_req = self._chat_request(req)
        rid, created = random_id("resp").replace("-", "_", 1), int(time.time())
        try:
            result = await self.chat.create_chat_completion(chat_req)
        except (
            APIError,
            ParaspecError,
        ) as e:  # the chat fields' names, as this endpoint calls them
            err = error_for(e)
            param = RENAMED.get(err.param, err.param)
            raise APIError(
                str(err).replace(f"{err.param}=", f"{param}=") if err.param else str(err),
                err.status,
                err.type,
                param,
                err.code,
            ) from None
        if req.stream:
            return self._stream(req, rid, created, result)
        choice = result.choices[0]
        return ResponseObject.model_validate(
            self._response(
                req,
                rid,
                created,
                choice.message.content or "",
                choice.finish_reason,
                result.usage.model_dump(),
                result.paraspec,
            )
        )

    async def _stream(
        self, req: ResponsesRequest, rid: str, created: int, chunks: AsyncIterator[str]
    ) -> AsyncIterator[str]:
        seq = 0

        def event(kind: str, **fields) -> str:
            nonlocal seq
            seq += 1
            return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq - 1, **fields})}\n\n"

        item_id = f"msg_{rid[5:]}"
        where = dict(item_id=item_id, output_index=0, content_index=0)
        start = self._response(req, rid, created, "", None, None, None, status="in_progress")
        yield event("response.created", response=start)
        yield event("response.in_progress", response=start)
        yield event(
            "response.output_item.added",
            output_index=0,
            item={
                "type": "message",
                "id": item_id,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            },
        )
        yield event(
            "response.content_part.added",
            **where,
            part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        )
        try:
            async for event_text in self._relay(req, rid, created, chunks, where, event):
                yield event_text
        finally:
            await chunks.aclose()  # the chat stream's engine request ends with this stream

    async def _relay(
        self,
        req: ResponsesRequest,
        rid: str,
        created: int,
        chunks: AsyncIterator[str],
        where: dict,
        event,
    ) -> AsyncIterator[str]:
        """The chat stream's chunks as output_text deltas, then the .done events and the final response."""
        text: list[str] = []
        finish = usage = stats = None
        async for line in chunks:
            data = line.removeprefix("data: ").strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:  # the chat stream's error event: the response failed
                e = chunk["error"]
                yield event(
                    "error", code=e.get("code"), message=e.get("message"), param=e.get("param")
                )
                failed = self._response(
                    req, rid, created, "".join(text), None, None, None, status="failed"
                )
                failed["error"] = {
                    "code": e.get("code") or "server_error",
                    "message": e.get("message"),
                }
                yield event("response.failed", response=failed)
                return
            for c in chunk.get("choices", []):
                if delta := c.get("delta", {}).get("content"):
                    text.append(delta)
                    yield event("response.output_text.delta", **where, delta=delta, logprobs=[])
                finish = c.get("finish_reason") or finish
            if chunk.get("usage"):
                usage, stats = chunk["usage"], chunk.get("paraspec")
        done = self._response(req, rid, created, "".join(text), finish, usage, stats)
        item = done["output"][0]
        yield event(
            "response.output_text.done", **where, text=item["content"][0]["text"], logprobs=[]
        )
        yield event("response.content_part.done", **where, part=item["content"][0])
        yield event("response.output_item.done", output_index=0, item=item)
        yield event(
            "response.incomplete" if done["status"] == "incomplete" else "response.completed",
            response=done,
        )
