"""Ray Serve scale-out benchmark: Ray Serve (2 replicas x 1 torch thread) against one `paraspec serve`
(1 engine x 2 threads), side by side in one run, over loopback, with the same requests.

    PYTHONPATH=src RAY_USAGE_STATS_ENABLED=0 unshare -n sh -c 'ip link set lo up && \
        python benchmarks/ray_serve --quick'          # ~3 min on 2 cores; without unshare where not permitted
    python benchmarks/ray_serve --model path/to/model.gguf --requests 24 --max-tokens 96

Both systems are up at once and measured in turns (a shared machine's load drifts over minutes; taking
turns spreads the drift over both). The Ray cluster runs in this process, each `paraspec serve` in a child.
  1. overhead   one engine of 1 thread both ways: `paraspec serve --threads 1` and Ray Serve 1 replica x
                1 thread (trie sync off), one request at a time, alternating. Serve overhead = Serve -
                direct: per request (a 1-token completion) and per streamed chunk (median gap between
                chunks of plain decoding, one token a chunk). 1 thread: on a loaded 2-core machine a
                2-thread engine's own stalls (OpenMP waits on a descheduled thread) would swamp it.
  2. memory     Ray Serve 2 replicas x 1 thread, trie sync on: tokens per step (the engine's stats) of two
                families of prompts, each forced first to one replica (cold memory: before), then to the
                other once the TrieHub carried the first replica's memory there (after).
  3. load       the same requests to `paraspec serve --threads 2` and to Ray Serve 2 x 1, streaming
                (httpx) and whole (the official openai client), in turns: direct, Ray, Ray, direct.
Writes ray_serve[-quick].json and .md to docs/bench/<today>-ray-serve (add the CPU to the name: docs/bench/README.md).
Every loop is bounded in count and time; Ray is shut down at the end and no process started here is left
(checked, in the JSON).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(Path(__file__).parent),
    str(ROOT / "benchmarks"),
    str(ROOT / "tests" / "ray_serve"),
]
from clients import free_port, probes, run_load  # noqa: E402
from options import parser  # noqa: E402
from cluster import descendants  # noqa: E402  (tests/ray_serve: what Ray started from this process)
# clients.py streams with serving.py's SSE reader (benchmarks/)

PROMPTS = [
    "Explain what a hash table is and when to use one.",
    "Write a Python function that checks if a string is a palindrome.",
    "List five tips for writing clear emails.",
    "What causes the seasons on Earth?",
    "Describe how a bicycle gear system works.",
    "Give a short recipe for pancakes.",
    "Summarise the plot of a heist story in a few sentences.",
    "Explain recursion to a beginner.",
    "What is the difference between a list and a tuple in Python?",
    "How do vaccines train the immune system?",
    "Write a haiku about autumn and explain it.",
    "Compare TCP and UDP briefly.",
]
# prompt families: one system prompt each, several questions (chat template applied)
FAMILY_A = (
    "You are the support assistant for the Acme X200 Wi-Fi router. Answer in numbered steps.",
    [
        "How do I reset the router to factory settings?",
        "How do I change the Wi-Fi password?",
        "Why is my connection slow in the evening?",
    ],
)
FAMILY_B = (
    "You are a cooking assistant. Answer briefly and practically.",
    [
        "How long should I boil an egg for a soft yolk?",
        "How do I keep rice from sticking to the pot?",
        "What can I use instead of butter when baking?",
    ],
)
# ====================================================================================== systems


def write_config(folder: Path, model: str, port: int, max_batch: int) -> Path:
    from paraspec.server.config import DEFAULT_PLUGIN_PARAMS

    config = {
        "ServerConfig": {"ipAddress": "127.0.0.1", "port": port, "maxLinkNum": 256},
        "BackendConfig": {
            "ModelDeployConfig": {
                "maxSeqLen": 2048,
                "maxInputTokenLen": 1536,
                "ModelConfig": [
                    {
                        "modelName": "bench",
                        "modelWeightPath": model,
                        "plugin_params": DEFAULT_PLUGIN_PARAMS,
                    }
                ],
            },
            "ScheduleConfig": {"maxBatchSize": max_batch, "maxIterTimes": 1024},
        },
    }
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


class DirectServer:
    """`paraspec serve --threads N` in a child process; ready() waits (bounded) for /ready."""

    def __init__(self, config: Path, port: int, threads: int):
        self.url = f"http://127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-m",
            "paraspec.cli",
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
            "--threads",
            str(threads),
        ]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    def ready(self, timeout_s: float = 600) -> float:
        while time.monotonic() - self.started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"paraspec serve exited ({self.proc.returncode}): {self.proc.stderr.read()[-2000:]}"
                )
            try:
                if httpx.get(self.url + "/ready", timeout=1).status_code == 200:
                    return round(time.monotonic() - self.started, 2)
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"paraspec serve not ready in {timeout_s} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_ray():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # the replicas import this tree's paraspec (PYTHONPATH reaches Ray's workers through the raylet)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 1024 * 1024,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        namespace="paraspec-bench",
    )
    return ray


def deploy(config_path: Path, port: int, **opts) -> tuple[str, float]:
    """serve.run of build_app(config.json, RayServeOptions(**opts)); returns (url, seconds to ready)."""
    from ray import serve

    from paraspec.ray_serve import build_app
    from paraspec.ray_serve.options import RayServeOptions
    from paraspec.server.config_loader import load_config

    t0 = time.monotonic()
    app = build_app(
        {"service_config": load_config(config_path), "options": RayServeOptions(**opts)}
    )
    serve.run(app, name=opts["app_name"], route_prefix="/")
    return f"http://127.0.0.1:{port}", round(time.monotonic() - t0, 2)


def undeploy(app_name: str, snapshot: str) -> None:
    from ray import serve

    from paraspec.ray_serve.launch import kill_hub
    from paraspec.ray_serve.options import RayServeOptions

    serve.delete(app_name)
    kill_hub(RayServeOptions(app_name=app_name, snapshot_path=snapshot))


def acceptance(app_name: str, max_tokens: int, sync_wait_s: float) -> dict:
    """Each question of a family first on one replica (cold memory: before), then, once the TrieHub has
    carried that replica's memory to the other, on the other (after); family A goes 1 -> 2, B 2 -> 1, the
    questions in turns, so that each replica's draft policy (which calibrates itself on what it has
    seen accepted) meets before- and after-requests alike. Then A again where it began (own memory)."""
    from ray import serve

    from paraspec import SamplingParams

    handle = serve.get_deployment_handle("ParaspecEngine", app_name)
    tok = handle.model_info.remote().result(timeout_s=60)[0].tokenizer
    params = SamplingParams(temperature=0, max_tokens=max_tokens)

    def here(replica: str, family: tuple[str, list[str]], i: int) -> dict:
        ids = tok.encode_chat(
            [{"role": "system", "content": family[0]}, {"role": "user", "content": family[1][i]}]
        )
        return [
            r
            for r in handle.broadcast("generate_here", replica, ids, params).results(timeout_s=300)
            if r
        ][0]

    def arrived(replica: str, ids: list[int]) -> float | None:
        # an output's start, without its end token
        path, t0 = (
            ids[: min(6, len(ids) - 1)],
            time.monotonic(),
        )
        while time.monotonic() - t0 < sync_wait_s:
            if dict(handle.broadcast("trie_count", path).results(timeout_s=30))[replica] > 0:
                return round(time.monotonic() - t0, 2)
            time.sleep(0.1)
        return None

    def per_step(runs: list[dict]) -> float:
        steps = sum(r["stats"]["decode_steps"] for r in runs)
        return round(
            sum(
                r["stats"]["mean_accepted_tokens_per_step"] * r["stats"]["decode_steps"]
                for r in runs
            )
            / steps,
            3,
        )

    r1, r2 = sorted(s["replica"] for s in handle.broadcast("stats").results(timeout_s=30))
    runs: dict[str, list] = {"A_before": [], "A_after": [], "B_before": [], "B_after": []}
    waits, same = [], True
    for i in range(len(FAMILY_A[1])):
        for name, family, src, dst in (("A", FAMILY_A, r1, r2), ("B", FAMILY_B, r2, r1)):
            before = here(src, family, i)
            waits.append(arrived(dst, before["token_ids"]))
            after = here(dst, family, i)
            runs[f"{name}_before"].append(before)
            runs[f"{name}_after"].append(after)
            same = same and after["token_ids"] == before["token_ids"]
    again = [here(r1, FAMILY_A, i) for i in range(len(FAMILY_A[1]))]
    return {
        "replica_1": r1,
        "replica_2": r2,
        "max_tokens": max_tokens,
        "prompts": 2 * len(FAMILY_A[1]),
        "before": per_step(runs["A_before"] + runs["B_before"]),
        "after": per_step(runs["A_after"] + runs["B_after"]),
        "A_r1_before": per_step(runs["A_before"]),
        "A_r2_after": per_step(runs["A_after"]),
        "B_r2_before": per_step(runs["B_before"]),
        "B_r1_after": per_step(runs["B_after"]),
        "A_r1_own_memory": per_step(again),
        "sync_arrived_s": None if None in waits else max(waits),
        "lossless": same,
    }


def run_all(args, config: Path, bodies: list[dict], tmp: Path) -> dict:
    direct1 = DirectServer(config, free_port(), threads=1)  # loading while Ray starts
    direct2 = DirectServer(config, free_port(), threads=2)
    ray = None
    out: dict = {}
    try:
        ray = start_ray()
        from ray import serve

        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        snap1, snap2 = str(tmp / "hub-1x1.npz"), str(tmp / "hub-2x1.npz")
        url, out["deploy_1x1_s"] = deploy(
            config,
            port,
            replicas=1,
            threads=1,
            sync_interval_s=0,
            app_name="b1x1",
            snapshot_path=snap1,
        )
        out["direct_1x1_ready_s"], out["direct_1x2_ready_s"] = direct1.ready(), direct2.ready()
        out["overhead"] = asyncio.run(probes({"direct": direct1.url, "serve": url}, *args.probe))
        undeploy("b1x1", snap1)
        url, out["deploy_2x1_s"] = deploy(
            config,
            port,
            replicas=2,
            threads=1,
            sync_interval_s=1.0,
            app_name="b2x1",
            snapshot_path=snap2,
        )
        out["acceptance"] = acceptance("b2x1", args.max_tokens, sync_wait_s=10)
        # in turns, mirrored so that drift weighs on each alike; direct-1x1 (a reference: one engine of
        # one thread, half the CPU) is the engine the Ray replicas run
        urls = {"direct": direct2.url, "ray": url, "direct-1x1": direct1.url}
        load: dict = {name: {} for name in urls}
        for name, stream in (
            ("direct", True),
            ("ray", True),
            ("direct-1x1", True),
            ("direct-1x1", False),
            ("ray", False),
            ("direct", False),
        ):
            load[name][stream] = asyncio.run(
                run_load(urls[name], bodies, args.concurrency, stream, args.budget_s / 8)
            )
        out["load"] = {k: [v[True], v[False]] for k, v in load.items()}
        undeploy("b2x1", snap2)
    finally:
        direct1.stop()
        direct2.stop()
        t0 = time.monotonic()
        if ray is not None:
            from ray import serve

            serve.shutdown()
            ray.shutdown()
        while descendants() and time.monotonic() - t0 < 30:
            time.sleep(0.25)
        out["shutdown_s"], out["left_behind"] = round(time.monotonic() - t0, 2), descendants()
    return out


# ====================================================================================== report


def report(res: dict) -> str:
    r = res["results"]
    lines = [
        f"# Ray Serve vs one `paraspec serve` ({res['when']}; {res['machine']})",
        "",
        f"`{res['command']}`",
        "",
        f"Model {res['model']}; {res['requests']} chat requests (max_tokens "
        f"{res['max_tokens']}, greedy), concurrency {res['concurrency']}, over loopback; the systems in turns.",
        "",
        "| system | mode | p50 latency s | p99 latency s | p50 TTFT s | tokens/s | tokens/step | replicas used "
        "| errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, name in (
        ("direct", "paraspec serve, 1 x 2 threads"),
        ("ray", "Ray Serve, 2 replicas x 1 thread"),
        ("direct-1x1", "(reference) paraspec serve, 1 x 1 thread"),
    ):
        for x in r["load"][key]:
            lines.append(
                f"| {name} | {x['mode']} | {x['p50_latency_s']} | {x['p99_latency_s']} | "
                f"{x['p50_ttft_s'] or '-'} | {x['tokens_per_s']} | {x['tokens_per_step']} | "
                f"{len(x['replicas']) or 1} | {x['errors']} |"
            )
    o = r["overhead"]
    lines += [
        "",
        f"Greedy outputs identical, Ray vs direct: {res['same_texts']}. The second mode (whole) repeats "
        "the first's requests: its tokens/step shows the drafting memory at work.",
        "",
        "Serve overhead: the same engine (1 thread) direct and as 1 Ray Serve replica (trie sync off), "
        "one request at a time, in turns:",
        "",
        "| probe | direct ms | Ray Serve ms | overhead ms |",
        "|---|---|---|---|",
    ]
    for key, what in (
        ("trivial_p50_ms", f"1-token completion, p50 of {o['direct']['trivial_n']}"),
        ("trivial_p99_ms", "1-token completion, p99"),
        ("stream_ttft_p50_ms", "stream TTFT (plain decoding), p50"),
        ("chunk_gap_p50_ms", f"gap between streamed chunks, p50 of {o['serve']['chunks']}"),
        ("chunk_gap_p90_ms", "gap between streamed chunks, p90"),
    ):
        d, v = o["direct"][key], o["serve"][key]
        lines.append(
            f"| {what} | {d} | {v} | {None if d is None or v is None else round(v - d, 2)} |"
        )
    a = r["acceptance"]
    lines += [
        "",
        f"Shared drafting memory (TrieHub, sync every 1 s; {a['max_tokens']} tokens a prompt, 2 families of 3 "
        "prompts, each question forced first to one replica, then to the other; in turns):",
        "",
        "| family | first on (before) | tokens/step | then on (after the hub sync) | tokens/step |",
        "|---|---|---|---|---|",
        f"| A | replica 1 | {a['A_r1_before']} | replica 2 | {a['A_r2_after']} |",
        f"| B | replica 2 | {a['B_r2_before']} | replica 1 | {a['B_r1_after']} |",
        f"| both | | {a['before']} | | {a['after']} |",
        "",
        f"Each output reached the other replica's trie at most {a['sync_arrived_s']} s after its request; "
        f"A again on replica 1 (its own memory): {a['A_r1_own_memory']} tokens/step. "
        f"Outputs after = before: {a['lossless']}. Ready after: paraspec serve 1 thread "
        f"{r['direct_1x1_ready_s']} s, 2 threads {r['direct_1x2_ready_s']} s (loading together with Ray); "
        f"serve.run 1 x 1 {r['deploy_1x1_s']} s, 2 x 1 {r['deploy_2x1_s']} s. Ray shut down in "
        f"{r['shutdown_s']} s; {len(r['left_behind'])} processes left behind. Whole run {res['elapsed_s']} s.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = parser(
        "python benchmarks/ray_serve", __doc__, "model (default: the bundled SmolLM2-135M-Instruct)"
    )
    ap.add_argument("--quick", action="store_true", help="a short run (~3 min on 2 cores)")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument(
        "--budget-s", type=float, default=3200.0, help="time bound of the run (each load gets 1/8)"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.max_tokens, args.budget_s = (
            min(args.requests, 8),
            min(args.max_tokens, 40),
            800.0,
        )
    # trivial requests, streams, tokens a stream
    args.probe = (12, 3, 32) if args.quick else (24, 6, 48)
    bodies = [
        {
            "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            "max_tokens": args.max_tokens,
        }
        for i in range(args.requests)
    ]
    started = time.monotonic()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(Path(tmp), args.model, free_port(), max_batch=8)
        results = run_all(args, config, bodies, Path(tmp))
    same = [
        a == b
        for a, b in zip(results["load"]["direct"][0]["texts"], results["load"]["ray"][0]["texts"])
    ]
    res = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, a loaded, shared machine (load average "
        f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)",
        "command": "python benchmarks/ray_serve"
        + (" --quick" if args.quick else "")
        + (f" --model {args.model}" if args.model != "default" else ""),
        "model": args.model,
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        "same_texts": f"{sum(same)}/{len(same)}",
        "elapsed_s": round(time.monotonic() - started, 1),
        "results": results,
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = "ray_serve-quick" if args.quick else "ray_serve"
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1))
    (out / f"{stem}.md").write_text(report(res))
    print(report(res))
    print(f"elapsed {res['elapsed_s']} s; wrote {out / stem}.json/.md")
    return 0 if not results["left_behind"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
