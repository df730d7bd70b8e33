"""Cancellation under load, on the bundled model through a live server: 8 concurrent greedy
memory_decoding streams (the official openai client, one thread each), 3 of them closed by the
client mid-stream. The 5 others equal offline plain decoding of the same prompts, the 3 are
counted as aborted, and nothing of any of them is left: no sequence in the engine, no KV cache
alive, no trie prompt, stream or pin, and no per-request key anywhere under the engine (drafter,
draft policy, trie, cost refresh: engine_state.held_keys walks them all)."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_state import held_keys, idle_problems
from live_server import LiveServer
from paraspec import SamplingParams
from paraspec.config import parse_plugin_params
from paraspec.decoding.policy.cost import CostModel
from paraspec.server import create_app, load_config

pytestmark = pytest.mark.slow  # the bundled model: 8 streams on a 2-core machine

PROMPTS = [
    "Repeat exactly: the cat sat on the mat. the cat sat on the mat. the cat sat on",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "The capital of France is",
    "Once upon a time there was a little robot who",
    "SELECT name, age FROM users WHERE",
    "<ul>\n  <li>one</li>\n  <li>two</li>\n  <li>",
    "Dear team,\n\nThank you for",
]
CUT = {1, 4, 6}  # the streams the client closes after CUT_AFTER chunks
CUT_AFTER = 2
SURVIVOR_TOKENS = 48
CUT_TOKENS = 1500  # far more than the batch decodes before the close reaches the engine
WAIT_S = 300  # a hang guard on each barrier and stream, not a measurement


def _aborted(server) -> float:
    families = text_string_to_metric_families(server.http.get("/metrics").text)
    return sum(
        s.value
        for f in families
        if f.name == "paraspec_requests"
        for s in f.samples
        if s.name == "paraspec_requests_total" and s.labels.get("outcome") == "aborted"
    )


@pytest.fixture(scope="module")
def served(bundled_llm_default):
    """The run's bundled engine served with a private memory_decoding drafter (an empty trie of its
    own) and a fixed cost curve, both put back afterwards; AR is the same engine without a drafter."""
    llm = bundled_llm_default
    greedy = [SamplingParams(temperature=0, max_tokens=SURVIVOR_TOKENS) for _ in PROMPTS]
    ar = llm.generate(
        [p for i, p in enumerate(PROMPTS) if i not in CUT], greedy[: len(PROMPTS) - len(CUT)]
    )
    engine = llm.engine
    saved = engine.default_drafter, engine.forward_cost.model
    engine.default_drafter = engine.drafters.private(
        parse_plugin_params({"plugin_type": "memory_decoding"})
    )
    engine.pin_cost(CostModel())
    config = load_config(None)
    config.schedule.max_iter_times = CUT_TOKENS
    try:
        with LiveServer(create_app(llm, config)) as s:
            yield s, ar
    finally:
        engine.default_drafter = saved[0]
        engine.forward_cost.pin(saved[1])


def test_three_of_eight_memory_decoding_streams_closed_mid_stream_leave_nothing(served):
    server, ar = served
    model = server.client.models.list().data[0].id
    aborted = _aborted(server)
    started = threading.Barrier(len(PROMPTS) + 1, timeout=WAIT_S)  # every stream has its chunks
    snapshot = threading.Barrier(len(PROMPTS) + 1, timeout=WAIT_S)  # the engine's state is read

    def client(i: int) -> tuple[str, str, str | None]:
        stream = server.client.completions.create(
            model=model,
            prompt=PROMPTS[i],
            temperature=0,
            stream=True,
            timeout=WAIT_S,
            max_tokens=CUT_TOKENS if i in CUT else SURVIVOR_TOKENS,
            extra_body={"ignore_eos": i in CUT},
        )
        chunks = iter(stream)
        got = [next(chunks) for _ in range(CUT_AFTER)]
        started.wait()
        snapshot.wait()
        if i in CUT:
            stream.close()  # the client goes away mid-stream
            return got[0].id, "", None
        got += list(chunks)
        text = "".join(c.choices[0].text for c in got if c.choices)
        return got[0].id, text, [c.choices[0].finish_reason for c in got if c.choices][-1]

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        futures = [pool.submit(client, i) for i in range(len(PROMPTS))]
        started.wait()
        caches = server.call(
            lambda e: {s.request_id: weakref.ref(s.cache) for s in e.running if s.cache}
        )
        snapshot.wait()
        results = [f.result(WAIT_S) for f in futures]

    ids = [r[0] for r in results]
    assert {ids[i] for i in CUT} <= set(caches), caches  # the cut ones were decoding when closed
    survivors = [r for i, r in enumerate(results) if i not in CUT]
    for (_, text, finish), want in zip(survivors, ar):
        assert text == want.text and finish == want.finish_reason
    server.wait_idle(WAIT_S)
    assert _aborted(server) == aborted + len(CUT)
    engine = server.engine.engine
    assert idle_problems(engine, server.engine) == []
    gc.collect()
    assert [rid for rid, ref in caches.items() if ref() is not None] == []  # every KV cache freed
    assert held_keys(engine, set(ids)) == []
    assert engine.default_drafter.trie.stats().output_nodes > 0  # the drafter did draft
    answer = server.client.completions.create(
        model=model, prompt=PROMPTS[0], temperature=0, max_tokens=SURVIVOR_TOKENS
    )
    assert answer.choices[0].text == ar[0].text  # and serves on, exact
