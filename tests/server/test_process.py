"""`paraspec serve` as a process: address errors before the model loads, and SIGTERM always exits."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from paraspec.server.command import SHUTDOWN_GRACE_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(model_dir, *argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "paraspec.cli",
            "serve",
            "--model",
            str(model_dir),
            "--dtype",
            "float32",
            "--plugin",
            "none",
            "--threads",
            "1",
            *argv,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def unloadable_model_dir(model_dir, tmp_path_factory):
    """model_dir with its weights files garbled: its config reads, its load fails."""
    out = tmp_path_factory.mktemp("unloadable") / "model"
    shutil.copytree(model_dir, out)
    weights = [p for p in out.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".gguf")]
    assert weights
    for p in weights:
        p.write_bytes(b"not weights")
    return out


@pytest.mark.parametrize(
    "host, says",
    [(None, "another process is listening there"), ("192.0.2.1", "not an address of this machine")],
)
def test_an_address_it_cannot_listen_on_is_refused_before_the_model_loads(
    unloadable_model_dir, host, says
):
    """The model's weights are garbage: the address's error, not the load's, proves the order."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(
            unloadable_model_dir, "--port", str(port), *(["--host", host] if host else [])
        )
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("paraspec: error: cannot listen on")
        and says in lines[0]
    ), err


def test_the_unloadable_model_does_fail_its_load(unloadable_model_dir):
    """(So the test above would see a load error, were the model loaded before the address check.)"""
    proc = _serve(unloadable_model_dir, "--port", str(_free_port()))
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("serve started on garbled weights")
    assert proc.returncode != 0 and "cannot listen" not in err, err


@pytest.mark.slow
def test_sigterm_always_exits_within_the_grace_period(model_dir):
    """6 starts, each sent SIGTERM at another moment: during the imports, the load, the startup
    (0-5 s in), and serving (0-0.4 s after it answers)."""
    for i, (when, delay) in enumerate(
        [
            ("start", 0.0),
            ("serving", 0.0),
            ("start", 1.5),
            ("serving", 0.4),
            ("start", 3.0),
            ("start", 5.0),
        ]
    ):
        port = _free_port()
        proc = _serve(model_dir, "--port", str(port))
        url = f"http://127.0.0.1:{port}/health"
        if when == "serving":  # wait until it serves, then a little more
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url, timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.05)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=SHUTDOWN_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"try {i}: still running {SHUTDOWN_GRACE_S} s after SIGTERM")
        assert proc.returncode in (0, -signal.SIGTERM), (
            i,
            proc.returncode,
            proc.stderr.read()[-2000:],
        )
        proc.stderr.close()
