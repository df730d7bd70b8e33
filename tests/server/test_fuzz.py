"""Fuzzing the request schema against a live server on 127.0.0.1 (hypothesis, bounded examples):
no request gets a 5xx, streams end cleanly, the server stays healthy, and a greedy canary request
gives the same tokens after the fuzzing as before it."""
from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drafters import RandomTreeDrafter
from live_server import LiveServer
from paraspec import LLM
from paraspec.server import create_app, load_config

STATUSES: Counter = Counter()
EXAMPLES = int(os.environ.get("PARASPEC_FUZZ_EXAMPLES", "60"))     # more for a longer hunt
CANARY = {"prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([0, -1, 10**9, 2**63, -2**63]),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-46, 1e-40, 1e38, -0.0]),
                    st.text(max_size=20), st.sampled_from(["", "\ud800", "<|im_end|>", "\x00", "\u202e", "4"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)
# typed like the schema, with the values that broke servers before (top_p 1e-46, temperature 1e-40, ...)
PLAUSIBLE = {"temperature": st.one_of(st.floats(0, 3), st.sampled_from([1e-40, 1e-5, 0.0])),
             "top_p": st.one_of(st.floats(0, 1), st.sampled_from([1e-46, 1e-9])), "top_k": st.integers(-1, 100),
             "min_p": st.floats(0, 1), "max_tokens": st.integers(1, 24), "n": st.integers(1, 3),
             "seed": st.integers(0, 2**32), "stop": st.lists(st.text(max_size=4), max_size=3),
             "stop_token_ids": st.lists(st.integers(0, 258), max_size=3), "stream": st.booleans(),
             "repetition_penalty": st.floats(0.5, 2), "presence_penalty": st.floats(-2, 2),
             "frequency_penalty": st.floats(-2, 2), "ignore_eos": st.booleans(), "echo": st.booleans(),
             "paraspec": st.sampled_from([{"plugin_params": {"plugin_type": "memory_decoding"}},
                                          {"plugin_params": "none"}, {"plugin_params": {"plugin_type": "lookahead"}}])}
JUNK = {**{k: st.one_of(v, values) for k, v in PLAUSIBLE.items()}, "logprobs": values, "top_logprobs": values,
        "stream_options": st.one_of(st.just({"include_usage": True}), values), "model": values,
        "logit_bias": values, "user": values, "extra_key": values}
prompts = st.one_of(st.text(min_size=1, max_size=40), st.lists(st.integers(0, 258), min_size=1, max_size=8),
                    st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=3))
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]),
                                           "content": st.text(max_size=30)}), min_size=1, max_size=3)
bad_prompts = st.one_of(values, st.lists(st.integers(-5, 300), max_size=8))
bad_messages = st.one_of(values, st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "x", ""]),
                                                                 "content": st.one_of(st.text(max_size=30), values)}),
                                          max_size=3))


def bodies(main: str, plausible, junk) -> st.SearchStrategy:
    return st.one_of(st.fixed_dictionaries({main: plausible}, optional=PLAUSIBLE),
                     st.fixed_dictionaries({main: st.one_of(plausible, junk)}, optional=JUNK))


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    model_dir = tiny_model_dir("llama", n_layers=2, hidden=64)
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 400, 256
    config.schedule.max_iter_times = 64
    config.server.max_link_num = 16
    llm = LLM(str(model_dir), dtype="float32")
    llm.engine.default_drafter = RandomTreeDrafter(llm.model.args.vocab_size, nodes=4, seed=2)
    with LiveServer(create_app(llm, config)) as s:
        yield s


def _post(server, path: str, body: dict) -> None:
    payload = json.dumps(body, allow_nan=True)       # NaN / Infinity as Python's json writes them
    with server.http.stream("POST", path, content=payload, headers={"content-type": "application/json"}) as r:
        text = "".join(r.iter_text())
        assert r.status_code < 500, (body, r.status_code, text[:500])
        STATUSES[r.status_code] += 1
        if r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"):
            assert text.rstrip().endswith("data: [DONE]"), text[-300:]
            for event in text.split("\n\n"):
                if event.startswith("data: {"):
                    chunk = json.loads(event[6:])
                    assert "error" not in chunk or chunk["error"]["type"] != "internal_server_error", chunk
        elif r.status_code != 200:
            assert "error" in json.loads(text), text[:300]


@pytest.fixture(scope="module")
def canary(server):
    return server.http.post("/v1/completions", json=CANARY).json()["choices"][0]["text"]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.one_of(bodies("prompt", prompts, bad_prompts).map(lambda b: ("/v1/completions", b)),
                 bodies("messages", messages, bad_messages).map(lambda b: ("/v1/chat/completions", b))))
def _fuzz(server, case):
    path, body = case
    _post(server, path, body)


def test_fuzzed_requests_never_get_a_5xx_and_the_server_stays_exact(server, canary):
    _fuzz(server)
    print("statuses:", dict(STATUSES))
    assert STATUSES[200] >= EXAMPLES // 5 and STATUSES[400] >= EXAMPLES // 5, STATUSES      # the fuzzing reaches the engine, not only the schema
    assert server.http.get("/health").status_code == 200
    server.wait_idle(30)
    again = server.http.post("/v1/completions", json=CANARY).json()["choices"][0]["text"]
    assert again == canary
    assert server.engine.num_sequences == 0
