"""/v1/responses through the official openai client (client.responses.create), streamed and not, on a
live server over a tiny model: the answers are the chat endpoint's engine output for the same
conversation (instructions as the system message), and what the endpoint cannot do is a 400 naming
the field."""

from __future__ import annotations

import openai
import pytest

from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.server import create_app
from test_server import _config  # the tiny server's config (same folder, on sys.path)

INSTRUCTIONS = "Answer briefly."


@pytest.fixture(scope="module")
def server(model_dir):
    with LiveServer(create_app(LLM(str(model_dir), dtype="float32"), _config(model_dir))) as s:
        yield s


def _want(offline, messages, max_tokens):
    return offline.chat(messages, SamplingParams(temperature=0, max_tokens=max_tokens))[0]


def test_a_string_input_with_instructions(server, offline):
    r = server.client.responses.create(
        model="tiny",
        input="Name a colour.",
        instructions=INSTRUCTIONS,
        max_output_tokens=16,
        temperature=0,
    )
    want = _want(
        offline,
        [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": "Name a colour."},
        ],
        16,
    )
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == want.text and r.output[0].role == "assistant"
    assert r.status == ("incomplete" if want.finish_reason == "length" else "completed")
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.input_tokens == len(want.prompt_token_ids) and r.usage.output_tokens == len(
        want.token_ids
    )
    assert r.usage.input_tokens_details.cached_tokens == 0


def test_a_message_list_streamed(server, offline):
    messages = [
        {"role": "developer", "content": INSTRUCTIONS},
        {"role": "user", "content": [{"type": "input_text", "text": "Count: one, two,"}]},
        {"role": "assistant", "content": "three"},
        {"type": "message", "role": "user", "content": "Go on."},
    ]
    want = _want(
        offline,
        [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": "Count: one, two,"},
            {"role": "assistant", "content": "three"},
            {"role": "user", "content": "Go on."},
        ],
        24,
    )
    events = list(
        server.client.responses.create(
            model="tiny", input=messages, max_output_tokens=24, temperature=0, stream=True
        )
    )
    kinds = [e.type for e in events]
    final = "response.incomplete" if want.finish_reason == "length" else "response.completed"
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        final,
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == want.text
    assert events[-1].response.output_text == want.text == events[-4].text
    assert events[-1].response.usage.output_tokens == len(want.token_ids)


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(input="hi", previous_response_id="resp_1"), "previous_response_id"),
        (dict(input="hi", tools=[{"type": "function", "name": "f", "parameters": {}}]), "tools"),
        (
            dict(input=[{"type": "function_call_output", "call_id": "c", "output": "1"}]),
            "input[0].type",
        ),
        (dict(input=[{"role": "robot", "content": "hi"}]), "input[0].role"),
        (
            dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
            "input[0].content[0]",
        ),
        (dict(input=[]), "input"),
        (dict(input="hi", text={"format": {"type": "json_object"}}), "text.format"),
        (dict(input="hi", max_output_tokens=0), "max_output_tokens"),
        (dict(input="hi", max_output_tokens=10**6), "max_output_tokens"),
    ],
)
def test_what_it_cannot_do_is_a_400_naming_the_field(server, kwargs, param):
    with pytest.raises(openai.BadRequestError) as e:
        server.client.responses.create(model="tiny", **kwargs)
    assert e.value.body["param"] == param, e.value.body
