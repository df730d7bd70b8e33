"""Tool calls: parsed from whole and streamed outputs, and rendered through a template that takes
`tools` (Qwen2.5's) and one that does not (ChatML without tools: the system message carries them)."""

from __future__ import annotations

import json

from paraspec.model.tokenizer import Tokenizer
from paraspec.server.tool_calls import (
    ToolCallStream,
    check_tools,
    parse_tool_calls,
    template_messages,
)
from tiny_models import CHATML, byte_level_tokenizer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
# Qwen2.5-Instruct's template, as its tokenizer_config.json ships it (the tool parts)
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
]


def _tokenizer(template: str) -> Tokenizer:
    return Tokenizer(
        byte_level_tokenizer(),
        bos_token_id=None,
        eos_token_ids=[258],
        add_bos=False,
        chat_template=template,
        special_tokens={},
    )


def _render(template: str, choice=None) -> str:
    tok = _tokenizer(template)
    messages, tools = template_messages(
        TURNS, check_tools([WEATHER], choice), tok.template_takes_tools
    )
    return tok.apply_chat_template(messages, tools=tools)


def test_a_template_that_takes_tools_renders_them_and_the_calls():
    text = _render(QWEN25)
    assert _tokenizer(QWEN25).template_takes_tools and not _tokenizer(CHATML).template_takes_tools
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    # the call's arguments string became an object for the template's tojson (not a quoted string)
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    )
    assert "<tool_response>\nsunny\n</tool_response>" in text and text.endswith(
        "<|im_start|>assistant\n"
    )
    assert "<tools>" not in _render(QWEN25, "none")


def test_a_template_without_tools_gets_them_in_the_system_message():
    text = _render(CHATML)
    assert text.startswith("<|im_start|>system\n# Tools\n") and '"name": "get_weather"' in text
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    )
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>" in text


def test_parse_whole_outputs():
    plan = check_tools([WEATHER], "auto")
    content, calls = parse_tool_calls(
        'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Oslo"}}\n</tool_call>',
        plan,
    )
    assert content == "Let me look." and calls[0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert parse_tool_calls("no call here", plan) == ("no call here", [])
    bad = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'  # not a known function: text
    assert parse_tool_calls(bad, plan) == (bad, [])
    two = '<tool_call>\n[{"name": "get_weather"}]\n</tool_call>'
    assert parse_tool_calls(two, plan) == (two, [])


def test_stream_holds_back_only_what_may_open_a_call():
    plan = check_tools([WEATHER], "auto")
    text = (
        'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bari"}}\n</tool_call>'
    )
    for size in (1, 3, 7, len(text)):
        s = ToolCallStream(plan)
        content, calls = "", []
        for i in range(0, len(text), size):
            c, found = s.push(text[i : i + size])
            content += c
            calls += found
        content += s.flush()
        assert content == "Sure. " and [c["index"] for c in calls] == [0, 1]
        assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Rome", "Bari"]
    s = ToolCallStream(plan)
    assert s.push("a <tool") == ("a ", []) and s.push("s are fun") == ("<tools are fun", [])
