"""bench/llama_server: llama.cpp's llama-server as a peer. The lookup, flags, request and the skip
paths run everywhere; a real server on the bundled model runs where `make peers` built one."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from paraspec.bench import llama_server
from paraspec.bench.base import GREEDY, SAMPLED, BenchTask, RunParams, SkipSystem
from paraspec.bench.llama_server import (
    LLAMA_SERVER_SYSTEMS,
    LlamaServerSystem,
    find_binary,
    measurement,
    request_body,
    server_command,
)
from paraspec.bench.systems import ALL_SYSTEMS, SystemContext, make_system

BINARY, WHY_ABSENT = find_binary()
needs_binary = pytest.mark.skipif(BINARY is None, reason=f"no llama-server: {WHY_ABSENT}")


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _ctx() -> SystemContext:
    llm = SimpleNamespace(runner=SimpleNamespace(max_seq_len=8192))
    return SystemContext(llm, "default", "float32", 1)


def test_every_variant_is_a_bench_system_with_its_documented_flags():
    assert set(LLAMA_SERVER_SYSTEMS) <= set(ALL_SYSTEMS)
    assert LLAMA_SERVER_SYSTEMS["llamaserver"] == ()
    # its defaults
    assert LLAMA_SERVER_SYSTEMS["llamaserver-ngram-mod"] == (
        "--spec-type",
        "ngram-mod",
    )
    long = LLAMA_SERVER_SYSTEMS["llamaserver-ngram-mod-long"]
    assert long[:2] == ("--spec-type", "ngram-mod") and "--spec-ngram-mod-n-min" in long
    # docs/speculative.md's example
    map_k = (
        "--spec-type",
        "ngram-map-k",
        "--spec-draft-n-max",
        "64",
    )
    assert LLAMA_SERVER_SYSTEMS["llamaserver-ngram-map-k"] == map_k
    cmd = server_command(Path("/x/llama-server"), Path("m.gguf"), 8080, 3, 4096, long)
    assert cmd[:3] == ["/x/llama-server", "-m", "m.gguf"] and cmd[-len(long) :] == list(long)
    for flag, value in (
        ("--port", "8080"),
        ("-t", "3"),
        ("-tb", "3"),
        ("-c", "4096"),
        ("-np", "1"),
        ("--cache-ram", "0"),
        ("--host", "127.0.0.1"),
    ):
        assert cmd[cmd.index(flag) + 1] == value


def test_binary_lookup_env_then_beside_python_then_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(llama_server.ENV_BINARY, raising=False)
    path, why = find_binary()
    assert path is None and "llama-server not found" in why and "`make peers`" in why
    beside = _script(bin_dir / "llama-server", "exit 0")
    assert find_binary() == (beside, "")
    monkeypatch.setenv(llama_server.ENV_BINARY, str(tmp_path / "nope"))
    path, why = find_binary()
    assert path is None and why.startswith(f"${llama_server.ENV_BINARY}=") and "`make peers`" in why
    named = _script(tmp_path / "my-server", "exit 0")
    monkeypatch.setenv(llama_server.ENV_BINARY, str(named))
    assert find_binary() == (named, "")


def test_absent_binary_and_non_gguf_model_are_skips(tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.setenv(llama_server.ENV_BINARY, str(tmp_path / "absent"))
    with pytest.raises(SkipSystem, match="make peers"):
        make_system("llamaserver", _ctx())
    monkeypatch.setenv(llama_server.ENV_BINARY, str(_script(tmp_path / "llama-server", "exit 0")))
    with pytest.raises(SkipSystem, match="llama-server needs a .gguf model"):
        LlamaServerSystem("llamaserver", str(tiny_model_dir("llama")), 1)


@pytest.mark.parametrize(
    "dies, how",
    [
        ("exit 1", "exit status 1"),
        # a native build moved to a CPU without its instructions
        ("kill -ILL $$", "killed by SIGILL"),
    ],
)
def test_a_server_that_cannot_start_is_a_skip_naming_its_last_line(
    tmp_path, monkeypatch, dies, how
):
    fake = _script(
        tmp_path / "llama-server",
        f"echo loading >&2; echo 'error: unknown argument: -np' >&2; {dies}",
    )
    monkeypatch.setenv(llama_server.ENV_BINARY, str(fake))
    system = make_system("llamaserver-ngram-mod", _ctx())
    with pytest.raises(SkipSystem) as e:
        system.prepare()
    assert str(e.value) == (
        f"llama-server did not start: {how}: error: unknown argument: -np; "
        "rebuild it with `make peers`"
    )
    system.close()
    assert system.proc is None


def test_request_body_asks_for_ar_token_count_and_the_bench_sampling():
    task = BenchTask("t", "t/0", [1, 2, 3], max_new_tokens=64)
    greedy = request_body(task, RunParams(GREEDY, target_tokens=17))
    assert greedy["prompt"] == [1, 2, 3] and greedy["n_predict"] == 17
    assert (greedy["cache_prompt"], greedy["return_tokens"], greedy["ignore_eos"]) == (
        False,
        True,
        False,
    )
    assert (greedy["temperature"], greedy["top_k"], greedy["repeat_penalty"]) == (0.0, 1, 1.0)
    sampled = request_body(task, RunParams(SAMPLED, seed=7))
    assert sampled["n_predict"] == 64 and sampled["seed"] == 7
    assert (sampled["temperature"], sampled["top_p"]) == (0.8, 0.95)
    assert sampled["samplers"] == ["temperature", "top_p"]  # paraspec's order, no default filters


def test_timings_become_the_measurement():
    """predicted_ms covers the tokens after the first: tok/s = (n - 1) / predicted_ms, as paraspec's;
    each step emits its accepted draft tokens plus one, so steps = n - 1 - draft_n_accepted."""
    task = BenchTask("t", "t/0", [1] * 10, max_new_tokens=64)
    answer = {
        "tokens": list(range(21)),
        "stop_type": "limit",
        "timings": {
            "prompt_ms": 50.0,
            "predicted_n": 21,
            "predicted_ms": 400.0,
            "draft_n": 30,
            "draft_n_accepted": 12,
        },
    }
    m = measurement("llamaserver-ngram-mod", task, RunParams(GREEDY), answer, 0.5, speculative=True)
    assert (m.generated_tokens, m.ttft_s, m.decode_s, m.decode_tokens_per_s) == (
        21,
        0.05,
        0.4,
        50.0,
    )
    assert (m.forward_passes, m.mean_accepted_tokens_per_step, m.acceptance_rate) == (9, 2.5, 0.4)
    assert m.finish_reason == "length" and m.token_ids == list(range(21)) and m.prompt_tokens == 10
    # absent: nothing drafted
    del (
        answer["timings"]["draft_n"],
        answer["timings"]["draft_n_accepted"],
    )
    plain = measurement("llamaserver", task, RunParams(GREEDY), answer, 0.5, speculative=False)
    assert (plain.forward_passes, plain.mean_accepted_tokens_per_step) == (21, 1.0)
    assert plain.acceptance_rate is None


# ------------------------------------------------------------------ a real llama-server (make peers)

PASSAGE = (
    "The river rises in the northern hills, runs south past the old mill and the stone bridge, "
    "turns west below the market town, and reaches the sea at a wide muddy estuary where herons "
    "stand in the shallows at low tide. "
)


@pytest.fixture(scope="module")
def bundled(bundled_llm_default):
    llm = bundled_llm_default
    prompts = {
        "repeat": llm.tokenizer.encode(PASSAGE * 3),
        "chat": llm.tokenizer.encode_chat(
            [{"role": "user", "content": "Write a Python function that reverses a string."}]
        ),
        "list": llm.tokenizer.encode("The planets of the solar system, in order from the sun, are"),
    }
    return llm, prompts


def _ar_tokens(llm, ids: list[int], n: int) -> list[int]:
    from paraspec import SamplingParams

    return llm.generate([ids], SamplingParams(temperature=0, max_tokens=n))[0].token_ids


@needs_binary
def test_real_server_greedy_tokens_timings_and_agreement_with_ar(bundled):
    llm, prompts = bundled
    system = LlamaServerSystem("llamaserver", "default", 1)
    system.prepare()
    try:
        for name, ids in prompts.items():
            ar = _ar_tokens(llm, ids, 24)
            m = system.run(
                BenchTask("t", name, ids, max_new_tokens=64),
                RunParams(GREEDY, target_tokens=len(ar)),
            )
            same = next(
                (i for i, (a, b) in enumerate(zip(ar, m.token_ids)) if a != b),
                min(len(ar), len(m.token_ids)),
            )
            print(f"{name}: llama-server agrees with paraspec AR on {same} of {len(ar)} tokens")
            assert m.generated_tokens == len(m.token_ids) <= len(ar) and m.generated_tokens > 0
            assert (
                m.ttft_s > 0
                and m.decode_tokens_per_s > 0
                and m.mean_accepted_tokens_per_step == 1.0
            )
            # continuing a thrice-repeated passage: no close call between two tokens
            if name == "repeat":
                assert same >= 8
    finally:
        system.close()
    assert system.proc is None


@needs_binary
def test_real_ngram_mod_server_drafts_and_restarts_cold_per_run(bundled):
    llm, prompts = bundled
    system = LlamaServerSystem("llamaserver-ngram-mod", "default", 1)
    system.prepare()
    try:
        task = BenchTask("t", "repeat", prompts["repeat"], max_new_tokens=96)
        first_pid = system.proc.pid
        m = system.run(task, RunParams(GREEDY, target_tokens=96))
        assert system.proc.pid == first_pid  # the server's first request: no restart
        assert m.acceptance_rate > 0 and m.mean_accepted_tokens_per_step > 1
        assert m.forward_passes < m.generated_tokens  # some steps emitted several tokens
        again = system.run(task, RunParams(GREEDY, target_tokens=96))
        assert system.proc.pid != first_pid  # a fresh n-gram pool for the repeat
        assert again.token_ids == m.token_ids and again.forward_passes == m.forward_passes
    finally:
        system.close()
    assert system.proc is None and not llama_server._LIVE  # both server processes were stopped
