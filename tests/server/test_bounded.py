"""Bounded work per request: a prompt that cannot fit is refused before it is tokenized, long texts
are tokenized off the event loop, and /health answers whatever is in flight. Counted (what the
tokenizer was given, what answered while it held), not timed: the suite runs on slow cores too."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.server import create_app, load_config

MAX_INPUT = 256


def _server(model_dir, truncation: bool = False) -> LiveServer:
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 400, MAX_INPUT
    config.model_deploy.truncation = truncation
    return LiveServer(create_app(LLM(str(model_dir), dtype="float32"), config))


@pytest.fixture(scope="module")
def server(model_dir):
    with _server(model_dir) as s:
        yield s


def _tokenized(monkeypatch, tok) -> list[int]:
    """The lengths of the texts the server's tokenizer encodes from now on: the tests count what
    the server did, not seconds."""
    seen: list[int] = []
    real = tok.encode

    def encode(text, *args, **kwargs):
        seen.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(tok, "encode", encode)
    return seen


def test_a_15_mb_prompt_is_refused_before_it_is_tokenized(server, monkeypatch):
    huge = "ab " * 5_000_000
    tokenized = _tokenized(monkeypatch, server.app.state.serving_completion.tokenizer)
    for path, body in (
        ("/v1/completions", {"prompt": huge, "max_tokens": 2}),
        ("/v1/completions", {"prompt": ["hi", huge], "max_tokens": 2}),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": huge}], "max_tokens": 2},
        ),
    ):
        r = server.http.post(path, json=body)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded" and "characters" in err["message"]
    assert max(tokenized, default=0) < 100  # by its length alone ("hi" may be tokenized first)


def test_health_answers_with_oversized_prompts_in_flight(server, monkeypatch):
    """Two 15 MB prompts and two just inside the character bound (tokenized, then refused): /health
    answers all along, and only the latter reach the tokenizer. (How fast it answers is a timing,
    for benchmarks/; a wall-clock bound here fails on a slow core.)"""
    tok = server.app.state.serving_completion.tokenizer
    near = "x" * (MAX_INPUT * tok.max_token_chars - 1)
    bodies = [{"prompt": "ab " * 5_000_000, "max_tokens": 2}] * 2 + [
        {"prompt": near, "max_tokens": 2}
    ] * 2
    tokenized = _tokenized(monkeypatch, tok)
    codes: list[int] = []

    def post(body):
        codes.append(httpx.post(server.url + "/v1/completions", json=body, timeout=120).status_code)

    threads = [threading.Thread(target=post, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    health = []
    while any(t.is_alive() for t in threads):
        health.append(server.http.get("/health").status_code)
        time.sleep(0.01)
    for t in threads:
        t.join()
    assert codes == [400] * 4 and health and set(health) == {200}
    assert sorted(tokenized) == [len(near)] * 2  # never the 15 MB ones


def test_truncation_tokenizes_only_the_tail_and_keeps_the_end(model_dir, monkeypatch):
    """With truncation on, a huge prompt is cut to a tail before tokenizing; the tokens kept are the
    last maxInputTokenLen of the whole prompt's, and the output is what they give offline."""
    text = "".join(f"{i} apples, " for i in range(400_000))  # ~5 MB
    offline = LLM(str(model_dir), dtype="float32")
    ids = offline.tokenizer.encode(text)[-MAX_INPUT:]
    want = offline.generate([ids], SamplingParams(temperature=0, max_tokens=8))[0].outputs[0]
    with _server(model_dir, truncation=True) as s:
        tok = s.app.state.serving_completion.tokenizer
        tokenized = _tokenized(monkeypatch, tok)
        out = s.client.completions.create(
            model=s.client.models.list().data[0].id, prompt=text, max_tokens=8, temperature=0
        )
    assert tokenized == [2 * MAX_INPUT * tok.max_token_chars]  # the tail alone, once
    assert out.usage.prompt_tokens == MAX_INPUT and out.choices[0].text == want.text


def test_long_texts_tokenize_the_same_off_the_gil(model_dir):
    tok = LLM(str(model_dir), dtype="float32").tokenizer
    text = "Unicode: naïve café — 数字 " * 1000
    assert len(text) > 4096
    assert tok.encode(text) == tok.backend.encode(text, add_special_tokens=False).ids
    assert tok.min_tokens(len(text)) <= len(tok.encode(text))
