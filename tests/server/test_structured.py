"""Structured outputs and tool calls through the official openai client against a live server on
127.0.0.1 (a tiny random model, a random-tree drafter: every step verifies drafts under the grammar).
Outputs obey their schema and equal offline plain decoding under the same grammar; bad schemas,
grammars and tools are 400s naming the field."""

from __future__ import annotations

import json

import openai
import pytest

from drafters import RandomTreeDrafter
from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.server import create_app, load_config
from paraspec.structured.params import StructuredOutputsParams

pytest.importorskip("llguidance")

MODEL = "tiny"
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age"],
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
}
MESSAGES = [{"role": "user", "content": "Extract the person: Ann is 31."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "required": ["city"],
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"enum": ["c", "f"]},
            },
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "additionalProperties": False,
            "required": ["zone"],
            "properties": {"zone": {"enum": ["utc", "cet"]}},
        },
    },
}
JSON_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": SCHEMA, "strict": True},
}


@pytest.fixture(scope="module")
def server(model_dir):
    llm = LLM(str(model_dir), dtype="float32")
    vocab = llm.model.args.vocab_size
    llm.engine.default_drafter = RandomTreeDrafter(
        vocab, nodes=8, seed=2, tokens=llm.tokenizer.encode('{}":, 0123abc')
    )
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    config.model_deploy.model.model_name = MODEL
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 1024, 1000
    config.schedule.max_iter_times = 300
    with LiveServer(create_app(llm, config)) as s:
        yield s


def _constrained(**spec) -> SamplingParams:
    return SamplingParams(
        temperature=0, max_tokens=200, structured_outputs=StructuredOutputsParams(**spec)
    )


def _person(text: str) -> dict:
    doc = json.loads(text)
    assert (
        set(doc) == {"name", "age"} and isinstance(doc["name"], str) and type(doc["age"]) is int
    ), text
    return doc


def test_json_schema_equals_offline_plain_decoding(server, offline):
    r = server.client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=200, response_format=JSON_FORMAT
    )
    ref = offline.chat(MESSAGES, _constrained(json=SCHEMA))[0]
    assert r.choices[0].message.content == ref.text and r.choices[0].finish_reason == "stop"
    _person(ref.text)
    stats = r.model_extra["paraspec"]
    assert stats["draft_tokens"] > 0 and stats["choices"][0]["forced_draft_tokens"] > 0
    chunks = list(
        server.client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            temperature=0,
            max_tokens=200,
            response_format=JSON_FORMAT,
            stream=True,
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.text


def test_json_object_grammar_and_completions(server, offline):
    r = server.client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=0.9,
        seed=4,
        max_tokens=300,
        response_format={"type": "json_object"},
    )
    text = r.choices[0].message.content
    sampled = SamplingParams(
        temperature=0.9,
        seed=4,
        max_tokens=300,
        structured_outputs=StructuredOutputsParams(json_object=True),
    )
    assert text == offline.chat(MESSAGES, sampled)[0].text  # the seeded sample, served or offline
    assert text.lstrip().startswith("{")
    if r.choices[0].finish_reason == "stop":  # whole: one JSON object
        assert isinstance(json.loads(text), dict)
    else:
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 300
    r = server.client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=0,
        max_tokens=50,
        extra_body={"paraspec": {"grammar": {"regex": "[0-9]{3}-[a-z]{2}"}}},
    )
    assert (
        r.choices[0].message.content
        == offline.chat(MESSAGES, _constrained(regex="[0-9]{3}-[a-z]{2}"))[0].text
    )
    r = server.client.completions.create(
        model=MODEL,
        prompt="Person:",
        temperature=0,
        max_tokens=200,
        extra_body={"response_format": JSON_FORMAT},
    )
    assert r.choices[0].text == offline.generate("Person:", _constrained(json=SCHEMA))[0].text
    _person(r.choices[0].text)
    r = server.client.completions.create(
        model=MODEL,
        prompt="Pick:",
        temperature=0,
        max_tokens=20,
        extra_body={"paraspec": {"grammar": {"choice": ["red", "green"]}}},
    )
    assert r.choices[0].text in ("red", "green")


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_time"}}]
)
def test_required_and_named_tool_calls(server, choice):
    kw = dict(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        temperature=0,
        max_tokens=130,
        tools=[WEATHER, TIME],
        tool_choice=choice,
    )
    r = server.client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.tool_calls, msg
    for call in msg.tool_calls:
        args = json.loads(call.function.arguments)
        assert call.type == "function" and call.id.startswith("call_")
        if call.function.name == "get_weather":
            assert isinstance(args["city"], str) and set(args) <= {"city", "unit"}
        else:
            assert call.function.name == "get_time" and args["zone"] in ("utc", "cet")
    if choice != "required":
        assert [c.function.name for c in msg.tool_calls] == ["get_time"]
    # streamed: the same calls as OpenAI streams them (delta.tool_calls), the same finish
    calls: dict[int, dict] = {}
    finish = None
    for c in server.client.chat.completions.create(**kw, stream=True):
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            entry["name"] += tc.function.name or ""
            entry["arguments"] += tc.function.arguments or ""
        finish = (c.choices[0].finish_reason if c.choices else None) or finish
    assert finish == "tool_calls"
    assert [(v["name"], json.loads(v["arguments"])) for _, v in sorted(calls.items())] == [
        (t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls
    ]


def test_tools_reach_the_prompt_and_none_leaves_them_out(server):
    def prompt_tokens(**kw) -> int:
        r = server.client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=1, **kw
        )
        return r.usage.prompt_tokens

    plain = prompt_tokens()
    assert prompt_tokens(tools=[WEATHER]) > plain + 100  # auto: rendered into the system message
    assert prompt_tokens(tools=[WEATHER], tool_choice="none") == plain
    turns = MESSAGES + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    r = server.client.chat.completions.create(
        model=MODEL, messages=turns, tools=[WEATHER], max_tokens=4
    )
    assert r.usage.prompt_tokens > prompt_tokens(tools=[WEATHER])


@pytest.mark.parametrize(
    "kw, param",
    [
        (
            dict(
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "frob"}},
                }
            ),
            "response_format.json_schema.schema",
        ),
        (dict(response_format={"type": "yaml"}), "response_format.type"),
        (
            dict(extra_body={"paraspec": {"grammar": {"lark": 'start: x\nx: x "a"'}}}),
            "paraspec.grammar.lark",
        ),
        (dict(extra_body={"paraspec": {"grammar": {"regex": "a(b"}}}), "paraspec.grammar.regex"),
        (dict(extra_body={"paraspec": {"grammar": {"python": "x"}}}), "paraspec.grammar"),
        (
            dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}),
            "tool_choice.function.name",
        ),
        (
            dict(tools=[{"type": "function", "function": {"name": "bad name!"}}]),
            "tools[0].function.name",
        ),
        (
            dict(tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}]),
            "tools[0].function.parameters",
        ),
        (dict(tools=[{"type": "function"}]), "tools[0].function"),
        (
            dict(
                tools=[
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "frob"}}}
                ],
                tool_choice="required",
            ),
            "tools",
        ),
        (dict(tool_choice="required"), "tool_choice"),
        (
            dict(tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"}),
            "tools",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(server, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        server.client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=5, **kw)
    assert e.value.body["param"] == param, e.value.body
    assert "\n" not in e.value.body["message"]
