"""The real `paraspec serve` process (a subprocess on a free port, the tiny model, the official
openai client where a user would use it): its answers equal offline `LLM.generate`, SIGTERM
drains (open streams end with [DONE], /ready says 503, new work gets a 503, exit 0), the grace
period's end or a second SIGTERM cuts what is left with an SSE error event and exit code 1, and
an engine step that raises fails the requests in flight with a 500 while the server serves on.

Faults and slow steps come from tests/serve_with_faults.py (the real command with Engine.step
patched for requests that ask by their seed), so each case is deterministic on any CPU."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from paraspec import SamplingParams
from serve_with_faults import FAULT_SEED, SLOW_SEED

FAULTS = Path(__file__).parent.parent / "serve_with_faults.py"
START_S = 120  # a hang guard for the start (imports and load), not a measurement
EXIT_S = 60  # likewise for the exit after a signal
MODEL = "tiny"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    """`paraspec serve` on a free port; its log (stderr) goes to a file the test reads."""

    def __init__(
        self,
        model_dir: Path,
        tmp_path: Path,
        faults: bool = False,
        plugin: str | None = None,
        **server_config,
    ):
        self.port = _free_port()
        config = tmp_path / "config.json"
        model = {"modelName": MODEL, "modelWeightPath": str(model_dir)}
        if plugin:
            model["plugin_params"] = plugin
        config.write_text(
            json.dumps(
                {
                    "ServerConfig": {"port": self.port, **server_config},
                    "BackendConfig": {
                        "ModelDeployConfig": {
                            "maxSeqLen": 1000,
                            "maxInputTokenLen": 200,
                            "ModelConfig": [model],
                        },
                        "ScheduleConfig": {"maxIterTimes": 900},
                    },
                }
            )
        )
        entry = [str(FAULTS)] if faults else ["-m", "paraspec.cli"]
        self.log_path = tmp_path / "serve.log"
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, *entry, "serve", "--config", str(config), "--dtype", "float32"],
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=60)
        self.client = openai.OpenAI(
            base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=60
        )
        deadline = time.monotonic() + START_S
        while not self._healthy():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log()
            time.sleep(0.05)

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {EXIT_S} s after SIGTERM:\n{self.log()[-3000:]}")

    def close(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()


@pytest.fixture
def serve(model_dir, tmp_path):
    started: list[Serve] = []

    def start(faults: bool = False, plugin: str | None = None, **server_config) -> Serve:
        started.append(Serve(model_dir, tmp_path, faults, plugin, **server_config))
        return started[-1]

    yield start
    for s in started:
        s.close()


class SSE:
    """A streamed completion read event by event with httpx (the raw framing: error events, [DONE])."""

    def __init__(self, s: Serve, max_tokens: int, prompt: str = "Once upon a time"):
        body = {
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "seed": SLOW_SEED,
        }
        self.cm = s.http.stream("POST", "/v1/completions", json=body)
        self.response = self.cm.__enter__()
        assert self.response.status_code == 200
        self.lines = self.response.iter_lines()
        self.events: list[str] = []
        first = self.next()  # the request is in the engine now
        self.id = json.loads(first)["id"]

    def next(self) -> str:
        for line in self.lines:
            if line.startswith("data: "):
                self.events.append(line[6:])
                return line[6:]
        raise EOFError

    def rest(self) -> list[str]:
        try:
            while True:
                self.next()
        except (EOFError, httpx.HTTPError):
            pass
        self.cm.__exit__(None, None, None)
        return self.events

    @property
    def text(self) -> str:
        chunks = [json.loads(e) for e in self.events if e != "[DONE]"]
        return "".join(c["text"] for chunk in chunks for c in chunk.get("choices", []))


def _greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n, **kw)


def _assert_clean_log(log: str) -> None:
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]


# ------------------------------------------------------------------------------------ answers


def test_whole_and_streamed_answers_equal_offline_generate(serve, offline):
    # drafted, so the check is of lossless serving
    s = serve(plugin='{"plugin_type": "memory_decoding"}')
    prompt, messages = "def f(x):\n    return", [{"role": "user", "content": "Name a colour."}]
    ref = offline.generate(prompt, _greedy(24, ignore_eos=True))[0]
    r = s.client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=24, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].text == ref.text and r.usage.completion_tokens == len(ref.token_ids) == 24
    assert r.usage.prompt_tokens == len(ref.prompt_token_ids)
    chunks = list(
        s.client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=24,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == ref.text
    assert chunks[-1].usage.completion_tokens == 24
    ref = offline.chat(messages, _greedy(20))[0]
    r = s.client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=20, temperature=0
    )
    assert (
        r.choices[0].message.content == ref.text and r.choices[0].finish_reason == ref.finish_reason
    )
    assert r.usage.completion_tokens == len(ref.token_ids)
    chunks = list(
        s.client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=20, temperature=0, stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.text
    assert r.model_extra["paraspec"]["plugin"] == "memory_decoding"
    s.signal()
    assert s.wait() == 0
    _assert_clean_log(s.log())


def test_an_engine_step_that_raises_fails_the_requests_in_flight_and_the_server_serves_on(
    serve, offline
):
    s = serve(faults=True)
    stream = SSE(s, max_tokens=200)  # in flight when the step raises
    with pytest.raises(openai.InternalServerError) as e:
        s.client.completions.create(model=MODEL, prompt="x", max_tokens=8, seed=FAULT_SEED)
    err = e.value.body
    assert e.value.status_code == 500 and err["type"] == "internal_server_error", err
    assert "engine step failed" in err["message"] and "RuntimeError" in err["message"], err
    assert "injected" not in err["message"]  # the class names the cause; internals stay in the log
    events = stream.rest()
    assert events[-1] == "[DONE]", events[-3:]
    assert json.loads(events[-2])["error"]["type"] == "internal_server_error", events[-3:]
    assert len(stream.text) < 200
    ref = offline.generate("Once upon a time", _greedy(16, ignore_eos=True))[0]
    r = s.client.completions.create(
        model=MODEL,
        prompt="Once upon a time",
        max_tokens=16,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert r.choices[0].text == ref.text and s.http.get("/health").status_code == 200
    assert s.log().count("engine step failed") == 1


# ------------------------------------------------------------------------------------ shutdown


def _until_draining(s: Serve) -> httpx.Response:
    """/ready after SIGTERM, once the signal has been seen (a refused connection fails the test)."""
    for _ in range(400):
        r = s.http.get("/ready")
        if r.status_code != 200:
            return r
        time.sleep(0.01)
    pytest.fail("/ready still 200 after SIGTERM")


def test_sigterm_drains_open_streams_and_exits_0(serve, offline):
    s = serve(faults=True)
    stream = SSE(s, max_tokens=60)  # >= 3 s of slow steps
    s.signal()
    ready = _until_draining(s)
    assert ready.status_code == 503 and ready.json()["requests_in_flight"] == 1, ready.text
    assert s.http.get("/health").status_code == 200
    busy = s.http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
    assert busy.status_code == 503 and "shutting down" in busy.json()["error"]["message"], busy.text
    with pytest.raises(openai.APIStatusError) as e:
        s.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    assert e.value.status_code == 503
    events = stream.rest()
    assert events[-1] == "[DONE]" and not any('"error"' in e for e in events), events[-3:]
    assert stream.text == offline.generate("Once upon a time", _greedy(60, ignore_eos=True))[0].text
    assert s.wait() == 0
    log = s.log()
    _assert_clean_log(log)
    assert "cut by the shutdown" not in log


def _tgkill():
    """glibc's tgkill(pid, tid, sig): a signal to one thread of a process (Linux)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return getattr(libc, "tgkill", None)


def _blocks_sigterm(pid: int, tid: int) -> bool:
    """Whether a thread blocks SIGTERM (a signal sent to it would stay pending there)."""
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        blocked = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigBlk:"))
    return bool(blocked >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or _tgkill() is None, reason="needs Linux's tgkill"
)
def test_an_idle_server_exits_on_a_sigterm_the_kernel_gave_another_thread(serve):
    # A process's signal goes to whichever of its threads the kernel picks; Python runs the
    # handler on the main thread, when that thread next runs Python: an idle engine loop there
    # must not wait without end for a command that would wake it
    s = serve()
    r = s.client.completions.create(model=MODEL, prompt="x", max_tokens=2)
    assert r.usage.completion_tokens >= 1
    time.sleep(0.5)  # the engine loop idle, waiting for a command
    others = [
        int(t)
        for t in os.listdir(f"/proc/{s.proc.pid}/task")
        if int(t) != s.proc.pid and not _blocks_sigterm(s.proc.pid, int(t))
    ]
    assert others, "the server runs an HTTP thread beside its main thread"
    assert _tgkill()(s.proc.pid, others[0], signal.SIGTERM) == 0
    assert s.wait() == 0
    _assert_clean_log(s.log())


def _assert_cut(stream: SSE, log: str, max_tokens: int) -> None:
    events = stream.rest()
    assert events[-1] == "[DONE]", events[-3:]
    err = json.loads(events[-2])["error"]
    assert err["type"] == "service_unavailable_error" and "shutting down" in err["message"], err
    assert len(stream.text) < max_tokens
    lines = [line for line in log.splitlines() if stream.id in line]
    assert len(lines) == 1 and "cut by the shutdown" in lines[0], lines


def test_a_stream_still_running_when_the_grace_period_ends_gets_an_error_event_and_exit_1(serve):
    s = serve(faults=True, shutdownGrace=1)
    stream = SSE(s, max_tokens=400)  # >= 20 s of slow steps
    s.signal()
    assert s.wait() == 1
    log = s.log()
    _assert_cut(stream, log, 400)
    _assert_clean_log(log)


def test_a_second_sigterm_cuts_every_stream_at_once_and_exits_1(serve):
    s = serve(faults=True)  # the default grace: 30 s
    streams = [SSE(s, max_tokens=400), SSE(s, max_tokens=400, prompt="The quick brown fox")]
    s.signal()
    assert _until_draining(s).status_code == 503
    s.signal()
    assert s.wait() == 1
    log = s.log()
    for stream in streams:
        _assert_cut(stream, log, 400)
    _assert_clean_log(log)
