"""`paraspec serve --ray` as a user runs it: a process that starts its own Ray cluster (2 CPUs,
127.0.0.1), serves 2 engine replicas of a tiny model on the config's port, and on SIGTERM shuts
Serve and Ray down, leaving no process behind. Marked `ray`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip(
    "ray", reason="the paraspec[ray] extra is not installed (make test-ray installs it)"
)

from cluster import SRC, TESTS, descendants, free_port  # noqa: E402

pytestmark = pytest.mark.ray


def test_serve_ray_command_serves_and_stops_clean(tiny_model_dir, tmp_path):
    import httpx

    model = tiny_model_dir("llama", init_std=0.3)
    port = free_port()
    env = dict(
        os.environ,
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
        HOME=str(tmp_path),
        PYTHONPATH=os.pathsep.join([SRC, TESTS]),
    )
    log = open(tmp_path / "serve.log", "w+")  # a file, not a pipe nobody reads while it runs
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "paraspec.cli",
            "serve",
            "--ray",
            "--replicas",
            "2",
            "--threads",
            "1",
            "--model",
            str(model),
            "--port",
            str(port),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "paraspec serve --ray did not answer within 120 s"
            time.sleep(0.5)
        r = httpx.post(
            url + "/v1/completions",
            json={"prompt": "hello", "max_tokens": 8, "temperature": 0},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["paraspec"]["choices"][0]["replica"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "serve.log").read_text()[-3000:]
        deadline = time.monotonic() + 30
        while descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.25)
        left = [line for line in descendants() if "ray" in line]
        assert not left, left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()
