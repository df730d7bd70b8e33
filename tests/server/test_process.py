"""`paraspec serve` as a process: address errors before the model loads, and SIGTERM always exits."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from paraspec.server.command import SHUTDOWN_GRACE_S


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama", n_layers=2, hidden=64)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(model_dir, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "paraspec.cli", "serve", "--model", str(model_dir),
                             "--dtype", "float32", "--plugin", "none", "--threads", "1", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("host, says", [(None, "another process is listening there"),
                                        ("192.0.2.1", "not an address of this machine")])
def test_an_address_it_cannot_listen_on_is_refused_before_the_model_loads(model_dir, host, says):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        proc = _serve(model_dir, "--port", str(port), *(["--host", host] if host else []))
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paraspec: error: cannot listen on") and says in lines[0], err
    assert took < 10          # no model load (python + the config only)


@pytest.mark.slow
def test_sigterm_always_exits_within_the_grace_period(model_dir):
    """20 starts, each sent SIGTERM at another moment: during the load, the startup, and serving."""
    for i in range(20):
        port = _free_port()
        proc = _serve(model_dir, "--port", str(port))
        url = f"http://127.0.0.1:{port}/health"
        if i % 2:      # odd tries: wait until it serves, then a little more
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url, timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.05)
            time.sleep(0.1 * (i // 2))
        else:          # even tries: a moment during the imports, the load or the startup
            time.sleep(0.4 * i)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=SHUTDOWN_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"try {i}: still running {SHUTDOWN_GRACE_S} s after SIGTERM")
        assert time.monotonic() - t0 < 10, f"try {i}"
        assert proc.returncode in (0, -signal.SIGTERM), (i, proc.returncode, proc.stderr.read()[-2000:])
        proc.stderr.close()
