"""What a hostile or careless client sends, against a live uvicorn on 127.0.0.1: every case is a
one-line 4xx naming the field (never a 500 or a logged traceback), counted as the client's error,
and the HTTP framing a proxy could be fooled by is refused, with raw sockets where httpx would not
send it."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.server import create_app, load_config

BODY_TIMEOUT_S = 1.0
CHAT = "/v1/chat/completions"
USER = {"role": "user", "content": "x"}


@pytest.fixture(scope="module")
def server(model_dir):
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 400, 256
    config.server.body_timeout = BODY_TIMEOUT_S
    with LiveServer(create_app(LLM(str(model_dir), dtype="float32"), config)) as s:
        yield s


def _post(server, path: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = server.http.post(path, content=data, headers={"content-type": "application/json"})
    return r.status_code, r.json()


def _assert_400(status: int, body: dict, param: str | None, *says: str) -> dict:
    assert status == 400, body
    err = body["error"]
    assert err["type"] == "invalid_request_error" and "\n" not in err["message"], err
    assert err["param"] == param and all(s in err["message"] for s in says), err
    return err


# ------------------------------------------------------------------------------------ tool calls


def _assistant_calls(*calls) -> dict:
    return {"messages": [USER, {"role": "assistant", "tool_calls": list(calls)}], "max_tokens": 2}


AT = "messages[1].tool_calls[0]"
FN = {"name": "f", "arguments": "{}"}


@pytest.mark.parametrize(
    "call, param, says",
    [
        ({"id": "a", "type": "function"}, f"{AT}.function", "object"),
        ({"id": "a", "type": "function", "function": "get_weather"}, f"{AT}.function", "object"),
        (
            {"id": "a", "type": "function", "function": {"arguments": "{}"}},
            f"{AT}.function.name",
            "name",
        ),
        (
            {"id": "a", "type": "function", "function": {**FN, "name": 3}},
            f"{AT}.function.name",
            "name",
        ),
        (
            {"id": "a", "type": "function", "function": {**FN, "arguments": 3}},
            f"{AT}.function.arguments",
            "string",
        ),
        (
            {"id": "a", "type": "function", "function": {"name": "f"}},
            f"{AT}.function.arguments",
            "string",
        ),
        ({"id": "a", "type": "code", "function": FN}, f"{AT}.type", "function"),
        ({"id": 7, "type": "function", "function": FN}, f"{AT}.id", "string"),
    ],
)
def test_a_malformed_tool_call_in_the_history_is_a_400_naming_it(server, caplog, call, param, says):
    with caplog.at_level(logging.INFO, logger="paraspec"):
        status, body = _post(server, CHAT, _assistant_calls(call))
    _assert_400(status, body, param, param, says)
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_tool_calls_belong_to_assistant_turns(server):
    status, body = _post(
        server,
        CHAT,
        {
            "messages": [
                {
                    **USER,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            ],
            "max_tokens": 2,
        },
    )
    _assert_400(status, body, "messages[0].tool_calls", "assistant")


def test_well_formed_tool_calls_still_render(server):
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    for c in (call, {**call, "function": {"name": "f", "arguments": {"x": 1}}}):
        status, body = _post(server, CHAT, _assistant_calls(c))
        assert status == 200 and body["usage"]["completion_tokens"] == 2, body


# ------------------------------------------------------------------------------------ strictness


@pytest.mark.parametrize(
    "path, body, param, says",
    [
        (
            CHAT,
            {"messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role",
            "'user', 'assistant'",
        ),
        (CHAT, {"messages": [USER, {"role": "", "content": "x"}]}, "messages[1].role", "'system'"),
        (
            CHAT,
            {"messages": [USER], "stream": True, "stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage",
            "boolean",
        ),
        (
            "/v1/completions",
            {"prompt": "x", "stream": True, "stream_options": {"include_usage": 1}},
            "stream_options.include_usage",
            "boolean",
        ),
        ("/v1/completions", {"prompt": "x", "stop": ""}, "stop", "non-empty"),
        ("/v1/completions", {"prompt": "x", "stop": [""]}, "stop", "non-empty"),
        (CHAT, {"messages": [USER], "stop": ["ok", ""]}, "stop", "non-empty"),
        (
            "/v1/completions",
            {"prompt": "x", "paraspec": {"plugin_params": {"plugin_type": "none", "level": 3}}},
            "paraspec.plugin_params",
            "no other keys",
        ),
    ],
)
def test_lenient_fields_are_now_strict(server, path, body, param, says):
    status, answer = _post(server, path, {**body, "max_tokens": 2})
    _assert_400(status, answer, param, says)


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", b'{"prompt": "x", "stop": "a\\ud800", "max_tokens": 2}'),
        ("/v1/completions", b'{"prompt": "x", "stop": ["ok", "\\udfff"], "max_tokens": 2}'),
        (
            CHAT,
            b'{"messages": [{"role": "user", "content": "x"}], "stop": "\\ud800", "max_tokens": 2}',
        ),
    ],
)
def test_a_lone_surrogate_in_stop_is_a_400_as_in_messages(server, path, body):
    status, answer = _post(server, path, body)
    _assert_400(status, answer, "stop", "lone surrogate")


def test_developer_and_tool_roles_are_accepted(server, offline):
    messages = [{"role": "developer", "content": "Be brief."}, USER]
    status, body = _post(server, CHAT, {"messages": messages, "max_tokens": 6, "temperature": 0})
    ref = offline.chat(
        [{"role": "system", "content": "Be brief."}, USER],
        SamplingParams(temperature=0, max_tokens=6),
    )[0]
    # developer = system
    assert status == 200 and body["choices"][0]["message"]["content"] == ref.text
    tool = {"role": "tool", "content": "42", "tool_call_id": "a"}
    status, body = _post(server, CHAT, {"messages": [USER, tool], "max_tokens": 2})
    assert status == 200, body


@pytest.mark.parametrize(
    "plugin", [{"plugin_type": "none"}, '{"plugin_type": "none"}', {"plugin_type": " None "}]
)
def test_a_request_may_ask_for_plain_decoding_by_plugin_type_none(server, offline, plugin):
    status, body = _post(
        server,
        "/v1/completions",
        {
            "prompt": "Once upon",
            "max_tokens": 8,
            "temperature": 0,
            "paraspec": {"plugin_params": plugin},
        },
    )
    ref = offline.generate("Once upon", SamplingParams(temperature=0, max_tokens=8))[0]
    assert status == 200 and body["choices"][0]["text"] == ref.text, body
    assert body["paraspec"]["plugin"] is None and body["paraspec"]["draft_tokens"] == 0


def test_head_health_and_ready_answer_without_a_body(server):
    for path in ("/health", "/ready"):
        r = server.http.head(path)
        assert r.status_code == 200 and r.content == b"", (path, r.status_code, r.content)


# ------------------------------------------------------------------------------------ parse errors


@pytest.mark.parametrize(
    "body, says",
    [
        (b'{"prompt": "\xff\xfe", "max_tokens": 2}', "UTF-8"),
        (b'{"prompt": "x", "max_tokens": 2, "user": "\xc3"}', "UTF-8"),
        (b"[" * 1000 + b"]" * 1000, "deep"),
        (
            b'{"prompt": "x", "paraspec": {"grammar": '
            + b'{"a": ' * 1000
            + b"1"
            + b"}" * 1000
            + b"}}",
            "deep",
        ),
    ],
)
def test_unparseable_bodies_are_invalid_request_errors_with_a_reason(server, body, says):
    status, answer = _post(server, "/v1/completions", body)
    err = _assert_400(status, answer, None, says)
    assert err["code"] == "invalid_json"


# ------------------------------------------------------------------------------------ metrics


def _outcomes(server) -> dict[str, float]:
    families = text_string_to_metric_families(server.http.get("/metrics").text)
    return {
        s.labels["outcome"]: s.value
        for f in families
        if f.name == "paraspec_requests"
        for s in f.samples
        if s.name == "paraspec_requests_total"
    }


def test_a_request_the_engine_refuses_as_the_clients_error_is_not_an_engine_error(server):
    """The ASPD plugin on a model without its special tokens: refused where the engine adds the
    request (a 400), so it counts as invalid_request, not error."""
    before = _outcomes(server)
    status, body = _post(
        server,
        "/v1/completions",
        {"prompt": "x", "max_tokens": 2, "paraspec": {"plugin_params": {"plugin_type": "aspd"}}},
    )
    assert status == 400 and body["error"]["type"] == "invalid_request_error", body
    server.wait_idle()
    after = _outcomes(server)
    assert after.get("invalid_request", 0) == before.get("invalid_request", 0) + 1, after
    assert after.get("error", 0) == before.get("error", 0), after


# ------------------------------------------------------------------------------------ framing


def _raw(server, data: bytes, wait: float = 10.0) -> tuple[bytes, bool]:
    """Send bytes on a fresh connection; (everything the server answered, whether it closed)."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(wait)
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except socket.timeout:
            return out, False
    return out, True


def _request(headers: str, body: bytes) -> bytes:
    return (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{headers}"
        "\r\n"
    ).encode() + body


def test_content_length_with_chunked_encoding_is_refused_and_the_connection_closed(server):
    body = b'{"prompt": "x", "max_tokens": 2}'
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    out, closed = _raw(
        server, _request("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", chunked)
    )
    head, _, payload = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and closed, out[:300]
    # uvicorn's h11 parser passes such a request on and the app refuses it, naming both headers;
    # its httptools parser (uvicorn[standard], which e.g. Ray Serve installs) refuses it itself
    if payload != b"Invalid HTTP request received.":
        err = json.loads(payload)["error"]
        assert "Content-Length" in err["message"] and "Transfer-Encoding" in err["message"], err
    out, _ = _raw(server, _request("Transfer-Encoding: chunked\r\nConnection: close\r\n", chunked))
    assert out.startswith(b"HTTP/1.1 200"), out[:300]  # chunked alone is fine


def test_a_stalled_body_gets_408_and_the_connection_closed(server):
    """Content-Length promises 100 bytes, 20 come: after bodyTimeout the server answers 408 and
    closes (without the bound it would wait as long as the client does, past `wait`)."""
    t0 = time.monotonic()
    out, closed = _raw(
        server, _request("Content-Length: 100\r\n", b'{"prompt": "x", "max'), wait=30
    )
    head, _, payload = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and closed, out[:300]
    assert time.monotonic() - t0 >= BODY_TIMEOUT_S * 0.9  # not before the bound
    err = json.loads(payload)["error"]
    assert "bodyTimeout" in err["message"] and err["type"] == "invalid_request_error", err
    assert server.http.get("/health").status_code == 200
