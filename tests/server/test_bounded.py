"""Bounded work per request: a prompt that cannot fit is refused before it is tokenized, long texts
are tokenized off the event loop, and /health answers within a second whatever is in flight."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.server import create_app, load_config

MAX_INPUT = 256


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama", n_layers=2, hidden=64)


def _server(model_dir, truncation: bool = False) -> LiveServer:
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 400, MAX_INPUT
    config.model_deploy.truncation = truncation
    return LiveServer(create_app(LLM(str(model_dir), dtype="float32"), config))


@pytest.fixture(scope="module")
def server(model_dir):
    with _server(model_dir) as s:
        yield s


def test_a_15_mb_prompt_is_refused_in_milliseconds(server):
    huge = "ab " * 5_000_000
    for path, body in (("/v1/completions", {"model": "x", "prompt": huge, "max_tokens": 2}),
                       ("/v1/completions", {"prompt": ["hi", huge], "max_tokens": 2}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": huge}], "max_tokens": 2})):
        body.pop("model", None)
        t0 = time.perf_counter()
        r = server.http.post(path, json=body)
        assert r.status_code == 400, r.text
        assert time.perf_counter() - t0 < 1.0          # upload over loopback included
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded" and "characters" in err["message"]


def test_health_answers_within_a_second_with_oversized_prompts_in_flight(server):
    """Two 15 MB prompts and two just inside the character bound (tokenized, then refused)."""
    tok = server.app.state.serving_completion.tokenizer
    near = "x" * (MAX_INPUT * tok.max_token_chars - 1)
    bodies = [{"prompt": "ab " * 5_000_000, "max_tokens": 2}] * 2 + [{"prompt": near, "max_tokens": 2}] * 2
    codes: list[int] = []

    def post(body):
        codes.append(httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code)

    threads = [threading.Thread(target=post, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    worst = 0.0
    while any(t.is_alive() for t in threads):
        t0 = time.perf_counter()
        assert server.http.get("/health").status_code == 200
        worst = max(worst, time.perf_counter() - t0)
        time.sleep(0.01)
    for t in threads:
        t.join()
    assert codes == [400] * 4 and worst < 1.0


def test_truncation_tokenizes_only_the_tail_and_keeps_the_end(model_dir):
    """With truncation on, a huge prompt is cut to a tail before tokenizing; the tokens kept are the
    last maxInputTokenLen of the whole prompt's, and the output is what they give offline."""
    text = "".join(f"{i} apples, " for i in range(400_000))     # ~5 MB
    offline = LLM(str(model_dir), dtype="float32")
    ids = offline.tokenizer.encode(text)[-MAX_INPUT:]
    want = offline.generate([ids], SamplingParams(temperature=0, max_tokens=8))[0].outputs[0]
    with _server(model_dir, truncation=True) as s:
        t0 = time.perf_counter()
        out = s.client.completions.create(model=s.client.models.list().data[0].id, prompt=text, max_tokens=8,
                                          temperature=0)
        assert time.perf_counter() - t0 < 5.0
    assert out.usage.prompt_tokens == MAX_INPUT and out.choices[0].text == want.text


def test_long_texts_tokenize_the_same_off_the_gil(model_dir):
    tok = LLM(str(model_dir), dtype="float32").tokenizer
    text = "Unicode: naïve café — 数字 " * 1000
    assert len(text) > 4096
    assert tok.encode(text) == tok.backend.encode(text, add_special_tokens=False).ids
    assert tok.min_tokens(len(text)) <= len(tok.encode(text))
