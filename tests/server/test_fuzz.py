"""A seeded sample of benchmarks/fuzz_server.py's cases (every endpoint and feature, broken fields,
malformed JSON, long inputs, raw HTTP framing; four senders at once) against a live server whose
every decode step verifies a random draft tree: no 5xx, no hang, every 4xx one line naming the
field, no traceback logged; afterwards the server is idle and healthy, its engine holds nothing,
and a greedy canary gives the same tokens as before. Fixed seeds: the same cases on every run
(`python benchmarks/fuzz_server.py --replay SEED:CASE` replays one against `paraspec serve`)."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest

from drafters import RandomTreeDrafter
from engine_state import idle_problems
from live_server import LiveServer
from paraspec import LLM
from paraspec.server import create_app, load_config

# by its path: benchmarks/ on sys.path would shadow the kernels package (benchmarks/kernels.py)
_spec = importlib.util.spec_from_file_location(
    "fuzz_server", Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_server.py"
)
sys.modules["fuzz_server"] = fuzz_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz_server)

SEEDS = [(101, 50), (202, 50)]  # (seed, cases)
BODY_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def server(model_dir):
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 1024, 960
    config.schedule.max_iter_times = 64
    config.server.max_link_num = 16
    config.server.body_timeout = BODY_TIMEOUT_S
    llm = LLM(str(model_dir), dtype="float32")
    llm.engine.default_drafter = RandomTreeDrafter(llm.model.args.vocab_size, nodes=4, seed=2)
    with LiveServer(create_app(llm, config)) as s:
        yield s


@pytest.mark.parametrize("seed, cases", SEEDS, ids=[f"seed{s}" for s, _ in SEEDS])
def test_fuzzed_requests_keep_the_rule_and_the_server_stays_exact(server, seed, cases, caplog):
    before = fuzz_server.canary(server.url)
    with caplog.at_level(logging.INFO, logger="paraspec"):
        report = fuzz_server.run(
            server.url,
            seed,
            cases,
            concurrency=4,
            timeout=60,
            body_timeout=BODY_TIMEOUT_S,
            log=lambda line: None,
        )
    failures = [
        f"--replay {case.replay}: {why}\n    {case.describe()}" for case, why in report.failures
    ]
    assert failures == [], "\n".join(failures)
    assert report.statuses[200] >= cases // 5 and report.statuses[400] >= cases // 5, (
        report.statuses
    )
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []  # no traceback logged
    assert fuzz_server.after_the_fuzz(server.url, before) == []
    server.wait_idle(30)
    assert idle_problems(server.engine.engine, server.engine) == []


# what the fuzzing found, each a one-line 400 naming the field now (a 500 with a logged TypeError,
# an error naming the engine's field rather than the one the request sent, a prompt too long for
# its tools' definitions blamed on the messages alone, a plugin's key named outside plugin_params)
USER = {"role": "user", "content": "x"}
CHAT, RESPONSES = "/v1/chat/completions", "/v1/responses"
LONG_TOOL = {
    "type": "function",
    "function": {"name": "f", "description": "d" * 5000, "parameters": {}},
}
MAX = "max_completion_tokens"
LOOKAHEAD_1 = {"plugin_params": {"plugin_type": "lookahead", "level": 1}}
FOUND = [
    (RESPONSES, {"input": [{"role": [[[]]], "content": "x"}]}, "input[0].role", "input"),
    (RESPONSES, {"input": [USER, {"role": {"a": 1}, "content": "x"}]}, "input[1].role", "input"),
    (
        CHAT,
        {"messages": [USER], "logprobs": True, "top_logprobs": 2**31},
        "top_logprobs",
        "top_logprobs=",
    ),
    (CHAT, {"messages": [USER], MAX: 0}, MAX, f"{MAX}="),
    (CHAT, {"messages": [USER], MAX: 10**6}, MAX, f"{MAX}="),
    (
        RESPONSES,
        {"input": "x", "max_output_tokens": 10**6},
        "max_output_tokens",
        "max_output_tokens=",
    ),
    (CHAT, {"messages": [USER], "tools": [LONG_TOOL]}, "messages", "the tools' definitions"),
    (
        "/v1/completions",
        {"prompt": "x", "paraspec": LOOKAHEAD_1},
        "paraspec.plugin_params",
        "paraspec.plugin_params: lookahead.level",
    ),
]


@pytest.mark.parametrize("path, body, param, says", FOUND)
def test_what_the_fuzzing_found_is_a_400_naming_the_field(server, caplog, path, body, param, says):
    with caplog.at_level(logging.INFO, logger="paraspec"):
        r = server.http.post(path, json=body)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param and says in err["message"], err
    assert "\n" not in err["message"] and not [rec for rec in caplog.records if rec.exc_info]
