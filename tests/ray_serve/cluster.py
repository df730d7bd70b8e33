"""An in-process Ray cluster serving paraspec on 127.0.0.1 for the `ray` tests: two engine replicas
of a tiny model (1 torch thread each, the 2 CPUs Ray is given), the ingress and the TrieHub at 0
CPUs. Usage stats off; loopback only (make test-ray runs pytest in a network namespace with only
`lo` when it can, so Ray's node address is 127.0.0.1 too)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import openai

SRC = str(Path(__file__).resolve().parents[2] / "src")
TESTS = str(Path(__file__).resolve().parents[1])
APP = "paraspec"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ray():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # the replicas import this tree's paraspec, not the one installed in the venv
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [SRC, TESTS, os.environ.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 1024 * 1024,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        namespace="paraspec-tests",
    )
    return ray


class Cluster:
    """serve.run of build_app(config, options) on a fresh port; clients for it."""

    def __init__(self, config, opts):
        from ray import serve

        self.port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": self.port})
        self.config = config
        self.deploy(opts)
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=60)
        self.client = openai.OpenAI(
            base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=60
        )
        self.engine = serve.get_deployment_handle("ParaspecEngine", APP)

    def deploy(self, opts) -> None:
        """serve.run (again: a changed user_config alone reconfigures the running replicas)."""
        from ray import serve

        from paraspec.ray_serve import build_app

        self.opts = opts
        serve.run(
            build_app({"service_config": self.config, "options": opts}), name=APP, route_prefix="/"
        )

    def broadcast(self, method: str, *args, timeout_s: float = 30) -> list:
        return self.engine.broadcast(method, *args).results(timeout_s=timeout_s)

    def live_stats(self, gone: str, n: int, timeout_s: float = 15) -> list[dict]:
        """The stats of n replicas once the handle no longer knows the replica `gone`: a handle learns
        of a replacement (and of the death) a moment after serve.status() reports it RUNNING, and a
        broadcast in between still reaches the dead actor."""
        start = time.monotonic()
        while True:
            try:
                stats = self.broadcast("stats", timeout_s=10)
                if len(stats) == n and gone not in {s["replica"] for s in stats}:
                    return stats
            except Exception:
                if time.monotonic() - start > timeout_s:
                    raise
            assert time.monotonic() - start < timeout_s, (
                f"the handle still lists the replica {gone}"
            )
            time.sleep(0.25)

    def replica_ids(self) -> list[str]:
        return sorted(s["replica"] for s in self.broadcast("stats"))

    def wait_running(self, n: int, timeout_s: float) -> float:
        """Seconds until the engine deployment has n RUNNING replicas."""
        from ray import serve

        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            status = serve.status().applications.get(APP)
            if status is not None:
                dep = status.deployments.get("ParaspecEngine")
                if (
                    dep is not None
                    and dep.replica_states.get("RUNNING", 0) == n
                    and dep.status == "HEALTHY"
                ):
                    return time.monotonic() - start
            time.sleep(0.25)
        raise AssertionError(f"{n} replicas not RUNNING within {timeout_s} s: {serve.status()}")

    def close(self) -> None:
        from ray import serve

        from paraspec.ray_serve.launch import kill_hub

        self.http.close()
        serve.delete(APP)
        kill_hub(self.opts)
        serve.shutdown()


def descendants(pid: int | None = None) -> list[str]:
    """Processes below `pid` (default: this one), as "pid args": what Ray started from here."""
    rows = subprocess.run(
        ["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True
    ).stdout.splitlines()
    kids: dict[int, list[tuple[int, str]]] = {}
    for row in rows:
        p, pp, *args = row.split(None, 2)
        kids.setdefault(int(pp), []).append((int(p), args[0] if args else ""))
    out, todo = [], [pid or os.getpid()]
    while todo:
        for p, args in kids.get(todo.pop(), []):
            if not args.startswith("ps "):
                out.append(f"{p} {args}")
                todo.append(p)
    return out
