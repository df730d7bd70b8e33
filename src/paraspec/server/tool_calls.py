"""Tool calling for /v1/chat/completions: the request's tools checked, the messages made ready for the
chat template, the grammar that `tool_choice` "required" or a named function enforces, and tool calls
parsed out of the generated text (whole, or as a stream goes).

The call format is Hermes / Qwen2.5 / Qwen3's, which SmolLM2 was also trained on:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

A template that takes `tools` (Qwen's) renders them itself; for one that does not (SmolLM2-135M's),
the tools go into the system message with the same instructions Qwen's template writes.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from .api_errors import APIError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
# one spelling of the JSON inside a call, as the templates write it: the keys and separators are forced
_WHITESPACE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass
class ToolPlan:
    """What the request's tools and tool_choice ask for."""

    # checked {"type": "function", "function": {...}}
    tools: list[dict] = field(default_factory=list)
    choice: str = "none"  # none, auto, required, or a function's name
    named: bool = False

    @property
    def parse(self) -> bool:
        return self.choice != "none"


def check_tools(tools: list | None, tool_choice: str | dict | None) -> ToolPlan:
    """The request's tools and tool_choice, or a 400 naming the field at fault."""
    checked = []
    for i, tool in enumerate(tools or []):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise APIError(
                f'{where} must be {{"type": "function", "function": {{"name": ..., "parameters": ...}}}}',
                param=f"{where}.type",
            )
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise APIError(
                f"{where}.function must be an object with a name", param=f"{where}.function"
            )
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise APIError(
                f"{where}.function.name must be 1-64 letters, digits, '_', '-' or '.'",
                param=f"{where}.function.name",
            )
        if fn.get("description") is not None and not isinstance(fn.get("description"), str):
            raise APIError(
                f"{where}.function.description must be a string",
                param=f"{where}.function.description",
            )
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise APIError(
                f"{where}.function.parameters must be a JSON schema object",
                param=f"{where}.function.parameters",
            )
        if any(t["function"]["name"] == name for t in checked):
            raise APIError(
                f"{where}.function.name {name!r} is given twice", param=f"{where}.function.name"
            )
        checked.append({"type": "function", "function": {**fn, "parameters": params}})
    names = [t["function"]["name"] for t in checked]
    if tool_choice is None:
        return ToolPlan(checked, "auto" if checked else "none")
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise APIError(
                f"tool_choice={tool_choice!r} is invalid: use 'none', 'auto', 'required' or "
                '{"type": "function", "function": {"name": ...}}',
                param="tool_choice",
            )
        if tool_choice != "none" and not checked:
            raise APIError(
                f"tool_choice={tool_choice!r} needs tools; send tools or drop tool_choice",
                param="tool_choice",
            )
        return ToolPlan(checked, tool_choice)
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if tool_choice.get("type") != "function" or not isinstance(name, str):
        raise APIError(
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
            '{"name": ...}}',
            param="tool_choice",
        )
    if name not in names:
        raise APIError(
            f"tool_choice names the function {name!r}, which is not in tools "
            f"({', '.join(names) or 'none given'})",
            param="tool_choice.function.name",
        )
    return ToolPlan(checked, name, named=True)


def check_history_calls(calls: list[dict], where: str) -> None:
    """An assistant turn's `tool_calls` (`where`: "messages[i].tool_calls") as the chat templates read
    them, or a 400 naming the entry's field: a template indexing a missing key would fail as a 500."""
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        if call.get("type", "function") != "function":
            raise APIError(f'{at}.type must be "function"', param=f"{at}.type")
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise APIError(
                f"{at}.id must be a string (the id a tool message answers)", param=f"{at}.id"
            )
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise APIError(
                f'{at}.function must be an object {{"name": ..., "arguments": "<JSON text>"}}',
                param=f"{at}.function",
            )
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise APIError(
                f"{at}.function.name must be a non-empty string (the function called)",
                param=f"{at}.function.name",
            )
        if not isinstance(fn.get("arguments"), (str, dict)):
            raise APIError(
                f"{at}.function.arguments must be a string of JSON (or an object)",
                param=f"{at}.function.arguments",
            )


def call_grammar(plan: ToolPlan) -> str | None:
    """The Lark grammar of the output `required` or a named function asks for; None otherwise."""
    if plan.choice in ("none", "auto"):
        return None
    tools = [t for t in plan.tools if not plan.named or t["function"]["name"] == plan.choice]
    body = {
        "x-guidance": _WHITESPACE,
        "anyOf": [
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "arguments"],
                "properties": {
                    "name": {"const": t["function"]["name"]},
                    "arguments": t["function"]["parameters"],
                },
            }
            for t in tools
        ],
    }
    start = "start: call" if plan.named else 'start: call ("\\n" call)*'
    return f'{start}\ncall: "{OPEN}\\n" body "\\n{CLOSE}"\nbody: %json {json.dumps(body)}'


def template_messages(
    messages: list[dict], plan: ToolPlan, takes_tools: bool
) -> tuple[list[dict], list | None]:
    """(messages, tools) for the chat template. Assistant tool calls get their arguments as objects (what
    the templates write with `tojson`); a template without tools gets them in its system message, with
    earlier calls and results written in the call format."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [_for_template(c) for c in m["tool_calls"]]
        out.append(m)
    tools = plan.tools if plan.choice != "none" and plan.tools else None
    if takes_tools:
        return out, tools
    for m in out:
        if m.get("tool_calls"):
            calls = "\n".join(
                f"{OPEN}\n{json.dumps(c['function'])}\n{CLOSE}" for c in m.pop("tool_calls")
            )
            m["content"] = ((m.get("content") or "") + "\n" + calls).strip("\n")
        elif m["role"] == "tool":
            m["role"], m["content"] = (
                "user",
                f"<tool_response>\n{m.get('content') or ''}\n</tool_response>",
            )
    if tools:
        text = system_tools_text(tools)
        if out and out[0]["role"] == "system":
            out[0]["content"] = (out[0].get("content") or "") + "\n\n" + text
        else:
            out.insert(0, {"role": "system", "content": text})
    return out, None


def system_tools_text(tools: list[dict]) -> str:
    lines = "\n".join(json.dumps(t) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
        f"function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each function "
        "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def _for_template(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    fn = dict(call["function"])
    if isinstance(fn.get("arguments"), str):
        try:
            fn["arguments"] = json.loads(fn["arguments"])
        except ValueError:
            pass  # the template writes the string as it came
    return {**call, "function": fn}


# ------------------------------------------------------------------------------------ output


def parse_call(body: str, names: set[str]) -> dict | None:
    """One call's JSON -> an OpenAI tool call, or None where it is not a call of a known function."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": json.dumps(args)},
    }


def parse_tool_calls(text: str, plan: ToolPlan) -> tuple[str | None, list[dict]]:
    """(content, tool calls) of a whole output: the text before the first call is the content; an output
    whose calls do not parse stays content."""
    names = {t["function"]["name"] for t in plan.tools}
    calls = [parse_call(b, names) for b in _CALL.findall(text)]
    if not calls or any(c is None for c in calls):
        return text, []
    content = text[: text.index(OPEN)].strip()
    return content or None, calls


class ToolCallStream:
    """Splits a streamed output into content deltas and whole tool calls: text that may be the start of
    `<tool_call>` is held back until it is known not to be; a call is sent once its `</tool_call>` came."""

    def __init__(self, plan: ToolPlan):
        self.names = {t["function"]["name"] for t in plan.tools}
        self.buffer = ""
        self.in_calls = False
        self.calls = 0

    def push(self, text: str) -> tuple[str, list[dict]]:
        """(content to send now, tool calls completed now, each with its stream index)."""
        self.buffer += text
        content, calls = "", []
        while True:
            if not self.in_calls:
                at = self.buffer.find(OPEN)
                if at < 0:
                    if self.calls:  # after a call, text is not content (as in parse_tool_calls)
                        return content, calls
                    keep = _partial_suffix(self.buffer, OPEN)
                    content += self.buffer[: len(self.buffer) - keep]
                    self.buffer = self.buffer[len(self.buffer) - keep :]
                    return content, calls
                content += self.buffer[:at].rstrip("\n") if not self.calls else ""
                self.buffer, self.in_calls = self.buffer[at:], True
            end = self.buffer.find(CLOSE)
            if end < 0:
                return content, calls
            call = parse_call(self.buffer[len(OPEN) : end].strip(), self.names)
            block = self.buffer[: end + len(CLOSE)]
            self.buffer, self.in_calls = self.buffer[end + len(CLOSE) :].lstrip(), False
            if call is None:
                content += block  # not a call after all: it is text
            else:
                calls.append({"index": self.calls, **call})
                self.calls += 1

    def flush(self) -> str:
        """What is left at the end: text, where no call came (an unfinished call is text too)."""
        rest, self.buffer = self.buffer, ""
        return rest if not self.calls else ""


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
