"""The serving benchmark of `paraspec bench --serving`: speedup against batch size through the
server, `paraspec serve` processes (AR and memory_decoding) under benchmarks/serving.py's load."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

from .paraspec_systems import PARASPEC_SYSTEMS
from .plan import Plan, Run

SERVING_CONCURRENCY = (1, 2, 4, 8)
SERVING_REQUESTS = 16
SERVING_MAX_NEW_TOKENS = 128
SERVING_PLUGIN = PARASPEC_SYSTEMS["md-tree"]


def serving_suite(plan: Plan, run: Run) -> dict | None:
    """Speedup vs batch size through the server: memory_decoding vs AR `paraspec serve` processes,
    driven by benchmarks/serving.py (its config writer, server process and load generator)."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "serving.py"
    if not path.is_file():
        run.notes.append(f"serving: skipped, {path} not found (run from a source checkout)")
        return None
    spec = importlib.util.spec_from_file_location("paraspec_bench_serving", path)
    serving = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serving)
    ns = argparse.Namespace(
        tiny=False,
        tasks="grounded",
        requests=plan.n or SERVING_REQUESTS,
        max_tokens=min(plan.max_new_tokens or SERVING_MAX_NEW_TOKENS, SERVING_MAX_NEW_TOKENS),
        dtype=plan.engine.dtype,
        threads=plan.engine.num_threads,
        max_batch=max(SERVING_CONCURRENCY),
    )
    requests = serving.load_requests(ns)
    work = Path(tempfile.mkdtemp(prefix="paraspec-bench-serving-"))
    out: dict = {
        "requests": len(requests),
        "max_tokens": ns.max_tokens,
        "plugin_params": SERVING_PLUGIN,
        "task_set": ns.tasks,
        "runs": [],
    }
    from tqdm import tqdm

    for c in tqdm(
        SERVING_CONCURRENCY[:2] if plan.quick else SERVING_CONCURRENCY,
        desc="bench serving",
        file=sys.stderr,
    ):
        for system, plugin in (("paraspec-ar", None), ("paraspec-md", json.dumps(SERVING_PLUGIN))):
            port = serving.free_port()
            config = serving.write_config(work, plan.engine.model, port, plugin, ns.max_batch)
            cmd = serving.paraspec_cmd(ns, config)
            try:
                with serving.ServerProcess(cmd, port) as server:
                    r = asyncio.run(serving.run_load(server.url, requests, c))
            except Exception as e:  # noqa: BLE001
                run.notes.append(f"serving: {system} at concurrency {c} failed: {e}")
                continue
            out["runs"].append({"system": system, **r})
    return out
