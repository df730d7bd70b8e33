"""llama.cpp's own `llama-server` as a bench peer, plain and with its n-gram speculative modes
(`make peers` builds it from the llama-cpp-python sdist's vendored llama.cpp into .venv/bin):

    llamaserver                  plain decoding
    llamaserver-ngram-mod        --spec-type ngram-mod with its defaults (lookup 24 tokens, drafts of 48-64)
    llamaserver-ngram-mod-long   ngram-mod drafting from 4 to 16 tokens (--spec-ngram-mod-n-min/-n-max)
    llamaserver-ngram-map-k      --spec-type ngram-map-k --spec-draft-n-max 64, docs/speculative.md's example;
                                 in this version its drafts are --spec-ngram-map-k-size-m long (48), the
                                 n-max flag sizing only model drafts
    llamaserver-ngram-cache      --spec-type ngram-cache (its n-gram statistics, drafts of up to 8)

One server per system on a free 127.0.0.1 port, the bench's GGUF and threads, one slot, no prompt
cache (`cache_prompt: false`, `--cache-ram 0`: every run prefills), a context of 4,096 tokens,
grown to the next power of two (a restart, untimed) when a run needs more, up to paraspec's own;
otherwise the server's defaults, as its users run it (flash attention `auto`, which the CPU takes:
its greedy tokens can part sooner from llama-cpp-python's, which runs without). Requests go to
`/completion` with paraspec's prompt token ids; the answer's `tokens` are the run's tokens and its
`timings` its figures:
  * ttft = prompt_ms: from the slot starting the prompt to the first token sampled (the HTTP
    round trip is outside it, as paraspec's TTFT has no HTTP either);
  * decode tokens/s = (predicted_n - 1) / predicted_ms, paraspec's (n - 1) / decode_s: the server's
    predicted_ms runs from the first token to the last, so predicted_n / predicted_ms would count
    the first token, which the prompt's forward produced, against the decode time;
  * decode steps = predicted_n - 1 - draft_n_accepted: a step emits its accepted draft tokens plus
    one; tokens/step = (predicted_n - 1) / steps (bonus included, as paraspec counts; 1.0 when plain),
    acceptance = draft_n_accepted / draft_n (draft tokens proposed). A draft is cut to the tokens
    left to generate, so only an EOS inside an accepted draft makes the count approximate.
    Forward passes = steps + 1 (the prefill once).

Memory: the n-gram modes keep state across requests (ngram-mod's hash pool is shared by all
requests; ngram-cache's statistics outlive one), which cannot be read, saved or cleared over HTTP.
A speculative server is therefore restarted before every run after its first (untimed), so each
request drafts from its prompt and its own output only: cold, and never a replay of an earlier
repeat's answer. paraspec's memory systems also carry the set's earlier tasks.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from .base import (
    GREEDY,
    SAMPLED_TEMPERATURE,
    SAMPLED_TOP_P,
    BenchTask,
    Measurement,
    RunParams,
    SkipSystem,
    SystemInfo,
)

ENV_BINARY = "PARASPEC_LLAMA_SERVER"
HOW_TO_BUILD = "`make peers` builds it into .venv/bin"
DEFAULT_CONTEXT = 4096
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 3600.0

# name -> the speculative flags of that variant (see the module docstring)
LLAMA_SERVER_SYSTEMS: dict[str, tuple[str, ...]] = {
    "llamaserver": (),
    "llamaserver-ngram-mod": ("--spec-type", "ngram-mod"),
    "llamaserver-ngram-mod-long": (
        "--spec-type",
        "ngram-mod",
        "--spec-ngram-mod-n-min",
        "4",
        "--spec-ngram-mod-n-max",
        "16",
    ),
    "llamaserver-ngram-map-k": ("--spec-type", "ngram-map-k", "--spec-draft-n-max", "64"),
    "llamaserver-ngram-cache": ("--spec-type", "ngram-cache"),
}

_LIVE: set[subprocess.Popen] = set()  # servers to stop when the bench exits, however it ends


def find_binary() -> tuple[Path | None, str]:
    """The llama-server to run ($PARASPEC_LLAMA_SERVER, else next to this Python, else on PATH),
    or None and why not."""
    named = os.environ.get(ENV_BINARY)
    if named:
        p = Path(named)
        if p.is_file() and os.access(p, os.X_OK):
            return p, ""
        return None, (
            f"${ENV_BINARY}={named} is not an executable file; point it at a llama-server "
            f"or unset it ({HOW_TO_BUILD})"
        )
    beside = Path(sys.executable).parent / "llama-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside, ""
    found = shutil.which("llama-server")
    if found:
        return Path(found), ""
    return None, f"llama-server not found (${ENV_BINARY}, {beside.parent} or PATH); {HOW_TO_BUILD}"


def server_command(
    binary: Path, model: Path, port: int, threads: int, n_ctx: int, spec_flags: tuple[str, ...]
) -> list[str]:
    # -np 1: one request at a time, as the bench runs them; --cache-ram 0: no saved prompt states
    return [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "-c",
        str(n_ctx),
        "-np",
        "1",
        "--cache-ram",
        "0",
        *spec_flags,
    ]


def request_body(task: BenchTask, params: RunParams) -> dict:
    """The /completion request: paraspec's prompt ids, AR's token count, the bench's sampling and
    nothing else (an explicit sampler chain: none of llama.cpp's default filters or penalties)."""
    body = {
        "prompt": list(task.prompt_ids),
        "n_predict": params.target_tokens or task.max_new_tokens,
        "cache_prompt": False,
        "return_tokens": True,
        "ignore_eos": False,
        "stream": False,
        "seed": params.seed,
        "repeat_penalty": 1.0,
        "min_p": 0.0,
        "n_probs": 0,
    }
    if params.mode == GREEDY:
        body.update(temperature=0.0, top_k=1, top_p=1.0, samplers=["top_k", "temperature"])
    else:  # paraspec's order: temperature, then top-p over the tempered distribution
        body.update(
            temperature=SAMPLED_TEMPERATURE,
            top_p=SAMPLED_TOP_P,
            top_k=0,
            samplers=["temperature", "top_p"],
        )
    return body


def measurement(
    name: str, task: BenchTask, params: RunParams, answer: dict, wall: float, speculative: bool
) -> Measurement:
    """A Measurement from a /completion answer (see the module docstring for each figure)."""
    t = answer["timings"]
    tokens = [int(x) for x in answer.get("tokens") or []]
    n = int(t.get("predicted_n", len(tokens)))
    decode = float(t["predicted_ms"]) / 1000.0
    drafted, accepted = int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))
    steps = max(n - 1 - accepted, 0)
    stop = answer.get("stop_type")
    return Measurement(
        suite="main",
        system=name,
        task_set=task.task_set,
        task_id=task.task_id,
        mode=params.mode,
        repeat=params.repeat,
        prompt_tokens=len(task.prompt_ids),
        generated_tokens=len(tokens),
        wall_s=round(wall, 6),
        ttft_s=round(float(t["prompt_ms"]) / 1000.0, 6),
        decode_s=round(decode, 6),
        decode_tokens_per_s=round((n - 1) / decode, 3) if n > 1 and decode > 0 else 0.0,
        forward_passes=steps + 1 if n else None,
        mean_accepted_tokens_per_step=round((n - 1) / steps, 4) if steps else None,
        acceptance_rate=(round(accepted / drafted, 4) if drafted else 0.0) if speculative else None,
        accepted_hist=None,
        draft_s=None,
        peak_rss_delta_bytes=None,
        kv_cache_bytes=None,
        finish_reason={"eos": "stop", "word": "stop", "limit": "length"}.get(stop, stop),
        token_ids=tokens,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


try:  # looked up before any fork: the child between fork and exec runs only the call
    _PRCTL = ctypes.CDLL(None).prctl
except (OSError, AttributeError):  # not Linux: atexit still stops the servers
    _PRCTL = None


def _die_with_parent() -> None:
    """In the child: SIGTERM when the bench process dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _LIVE.discard(proc)


@atexit.register
def _stop_all() -> None:
    for proc in list(_LIVE):
        _stop(proc)


class ServerDown(RuntimeError):
    """The server exited or would not start; the message ends with its last log line."""


class LlamaServerSystem:
    """One llama-server variant behind the bench's System interface (module docstring)."""

    def __init__(self, name: str, model: str, threads: int, max_context: int = DEFAULT_CONTEXT):
        from ..model.loader import resolve_model_path

        binary, why = find_binary()
        if binary is None:
            raise SkipSystem(why)
        self.path = resolve_model_path(model)
        if self.path.suffix != ".gguf":
            raise SkipSystem(f"llama-server needs a .gguf model, got {self.path}")
        self.name, self.binary, self.threads = name, binary, threads
        self.max_context, self.n_ctx = max_context, min(DEFAULT_CONTEXT, max_context)
        self.spec_flags = LLAMA_SERVER_SYSTEMS[name]
        what = " ".join(self.spec_flags) or "plain"
        self.info = SystemInfo(
            name,
            "peer",
            f"llama.cpp llama-server ({binary}), {what}",
            memory="cold (restarted per run)" if self.spec_flags else "",
        )
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self._log = None
        self._served = 0  # requests this server process has answered

    # the bench's hooks: state is per server process, handled in run()
    def begin_set(self, task_set: str) -> None: ...
    def begin_task(self) -> None: ...
    def end_task(self) -> None: ...

    def prepare(self) -> None:
        try:
            self._start()
        except ServerDown as e:
            self._shutdown()
            raise SkipSystem(
                f"llama-server did not start: {e}; rebuild it with `make peers`"
            ) from None
        version = self._version()
        if version:
            what = " ".join(self.spec_flags) or "plain"
            self.info.description = f"llama.cpp llama-server {version}, {what}"

    def _version(self) -> str:
        r = subprocess.run(
            [str(self.binary), "--version"], capture_output=True, text=True, timeout=60
        )
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("version:")]
        return lines[0].split(":", 1)[1].strip() if lines else ""

    def _last_log_line(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        lines = [
            ln.strip()
            for ln in self._log.read().decode(errors="replace").splitlines()
            if ln.strip()
        ]
        return lines[-1] if lines else ""

    def _exit_reason(self) -> str:
        code = self.proc.poll() if self.proc else None
        how = (
            f"exit status {code}"
            if code is not None and code >= 0
            else f"killed by {signal.Signals(-code).name}"
            if code is not None
            else "not started"
        )
        last = self._last_log_line()
        return f"{how}: {last}" if last else how

    def _start(self) -> None:
        port = _free_port()
        self._log = tempfile.TemporaryFile()
        cmd = server_command(
            self.binary, self.path, port, self.threads, self.n_ctx, self.spec_flags
        )
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        _LIVE.add(self.proc)
        self.url, self._served = f"http://127.0.0.1:{port}", 0
        deadline = time.monotonic() + START_TIMEOUT_S
        # /health answers 503 while the model loads, 200 when ready
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerDown(self._exit_reason())
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self._shutdown()
        raise ServerDown(f"not ready after {START_TIMEOUT_S:.0f} s")

    def _shutdown(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
        if self._log is not None:
            self._log.close()
        self.proc, self._log = None, None

    def _post(self, body: dict) -> dict:
        req = urllib.request.Request(
            self.url + "/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                return json.loads(r.read())
        except (
            urllib.error.HTTPError
        ) as e:  # the server's own error message, e.g. a prompt over its context
            detail = e.read().decode(errors="replace")
            try:
                detail = json.loads(detail)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                pass
            raise RuntimeError(f"llama-server answered {e.code}: {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerDown(f"llama-server died ({self._exit_reason()})") from None
            raise RuntimeError(f"llama-server did not answer: {e}") from None

    def run(self, task: BenchTask, params: RunParams) -> Measurement:
        need = len(task.prompt_ids) + (params.target_tokens or task.max_new_tokens) + 1
        # a fresh n-gram state per run (module docstring)
        restart = bool(self.spec_flags and self._served)
        if need > self.n_ctx and self.n_ctx < self.max_context:
            self.n_ctx, restart = min(self.max_context, 1 << (need - 1).bit_length()), True
        if restart:
            self._shutdown()
            self._start()
        if self.proc is None or self.proc.poll() is not None:
            raise ServerDown(f"llama-server is not running ({self._exit_reason()})")
        t0 = time.perf_counter()
        answer = self._post(request_body(task, params))
        wall = time.perf_counter() - t0
        self._served += 1
        return measurement(self.name, task, params, answer, wall, bool(self.spec_flags))

    def close(self) -> None:
        self._shutdown()
