"""Two "hosts" on one machine: network namespaces ps-h1 and ps-h2 joined by a veth pair (10.213.0.1 and
10.213.0.2; nothing else reachable), `ray start --head` in h1 and `ray start --address` in h2 (1 CPU
each), paraspec on Ray Serve with an HTTP proxy on every node and one engine replica per node. Requests
go through each host's proxy; then host 2 is lost (every process in its namespace SIGKILLed, by id) and
requests through host 1 must go on. Needs root (ip netns). Every loop is bounded; at the end every
process in both namespaces is ended by id and the namespaces are deleted.

    PYTHONPATH=src python benchmarks/ray_serve two-hosts [--requests 8] [--model default]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from options import parser  # noqa: E402

NS, IPS, PORT = ("ps-h1", "ps-h2"), ("10.213.0.1", "10.213.0.2"), 8000
APP = "twohosts"


def run(*cmd: str, ns: str | None = None, timeout: float = 180, env: dict | None = None) -> str:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    r = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed ({r.returncode}): {r.stderr[-1500:]}")
    return r.stdout


def ns_pids(ns: str) -> list[int]:
    r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


def kill_ns(ns: str, except_pid: int | None = None) -> int:
    """SIGKILL every process in the namespace, by id; returns how many."""
    pids = [p for p in ns_pids(ns) if p != except_pid]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def setup() -> None:
    for ns in NS:
        run("ip", "netns", "add", ns)
    run(
        "ip",
        "link",
        "add",
        "psv1",
        "netns",
        NS[0],
        "type",
        "veth",
        "peer",
        "name",
        "psv2",
        "netns",
        NS[1],
    )
    for ns, dev, ip in zip(NS, ("psv1", "psv2"), IPS):
        run("ip", "addr", "add", f"{ip}/24", "dev", dev, ns=ns)
        run("ip", "link", "set", dev, "up", ns=ns)
        run("ip", "link", "set", "lo", "up", ns=ns)


def teardown() -> dict:
    killed = {ns: kill_ns(ns) for ns in NS}
    time.sleep(1)
    left = {ns: ns_pids(ns) for ns in NS}
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return {"killed": killed, "left": left}


# ---------------------------------------------------------------------------------- the driver (in h1)


def ask(url: str, prompt: str, retries: int) -> dict:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    for attempt in range(retries + 1):
        t0 = time.perf_counter()
        try:
            r = client.completions.create(
                model="smollm2", prompt=prompt, max_tokens=24, temperature=0
            )
            ext = r.model_extra["paraspec"]["choices"][0]
            return {
                "ok": True,
                "s": round(time.perf_counter() - t0, 3),
                "replica": ext.get("replica"),
                "attempts": attempt + 1,
                "text": r.choices[0].text,
            }
        except Exception as e:
            err = f"{type(e).__name__}: {e}"[:160]
    return {"ok": False, "error": err, "attempts": retries + 1}


def driver(args) -> dict:
    import ray
    from ray import serve

    from paraspec.ray_serve import build_app
    from paraspec.ray_serve.options import RayServeOptions
    from paraspec.server.config_loader import load_config

    ray.init(address=f"{IPS[0]}:6379", log_to_driver=False)  # this cluster, whatever else runs here
    out: dict = {"nodes": sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])}
    serve.start(proxy_location="EveryNode", http_options={"host": "0.0.0.0", "port": PORT})
    # the Host check (else 127.0.0.1 only)
    config = load_config(None, model=args.model, allowed_hosts=list(IPS))
    config.model_deploy.model.model_name = "smollm2"
    t0 = time.monotonic()
    serve.run(
        build_app(
            {
                "service_config": config,
                "options": RayServeOptions(
                    replicas=2,
                    threads=1,
                    sync_interval_s=1.0,
                    snapshot_path=os.path.join(os.environ["RAY_TMPDIR"], "hub.npz"),
                    app_name=APP,
                ),
            }
        ),
        name=APP,
        route_prefix="/",
    )
    out["deploy_s"] = round(time.monotonic() - t0, 2)
    handle = serve.get_deployment_handle("ParaspecEngine", APP)
    out["replicas"] = {
        s["replica"]: s["node"] for s in handle.broadcast("stats").results(timeout_s=60)
    }
    urls = [f"http://{ip}:{PORT}" for ip in IPS]
    for url in urls:  # each node's proxy answers (bounded)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120 and not ask(url, "warm up", 0)["ok"]:
            time.sleep(1)
    prompts = [f"Request {i}: name a colour and a fruit." for i in range(args.requests)]
    out["before"] = {url: [ask(url, p, 0) for p in prompts] for url in urls}
    killed_at = time.monotonic()
    out["host2_processes_killed"] = kill_ns(NS[1])
    after = []
    while len(after) < 2 * args.requests and time.monotonic() - killed_at < 120:
        r = ask(urls[0], prompts[len(after) % len(prompts)], retries=1)
        r["t"] = round(time.monotonic() - killed_at, 2)
        after.append(r)
    out["after_host2_lost"] = after
    out["alive_nodes_after"] = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    serve.delete(APP)
    from paraspec.ray_serve.launch import kill_hub

    kill_hub(RayServeOptions(app_name=APP))
    serve.shutdown()
    ray.shutdown()
    return out


def summary(res: dict) -> str:
    d = res["driver"]
    lines = [
        f"# paraspec on Ray Serve across two network namespaces ({res['when']}; one 2-core machine, loaded and "
        "shared)",
        "",
        f"`{res['command']}`",
        "",
        f"Nodes {', '.join(d['nodes'])}; replicas on {', '.join(sorted(d['replicas'].values()))}; serve.run "
        f"{d['deploy_s']} s.",
        "",
        "| through | requests | ok | p50 s | replicas used |",
        "|---|---|---|---|---|",
    ]
    for url, rs in d["before"].items():
        ok = sorted(r["s"] for r in rs if r["ok"])
        lines.append(
            f"| {url} | {len(rs)} | {len(ok)} | {ok[len(ok) // 2] if ok else '-'} | "
            f"{len({r['replica'] for r in rs if r['ok']})} |"
        )
    after = d["after_host2_lost"]
    ok = [r for r in after if r["ok"]]
    first = [r for r in after if r["ok"] and r["attempts"] == 1]
    lines += [
        "",
        f"Host 2 lost ({d['host2_processes_killed']} processes SIGKILLed): through host 1, {len(ok)}/"
        f"{len(after)} requests succeeded with one retry ({len(first)} at the first attempt) over "
        f"{after[-1]['t'] if after else 0} s; alive nodes then: {', '.join(d['alive_nodes_after'])}. Cleanup: "
        f"{res['teardown']['killed']} processes ended by id, left: {res['teardown']['left']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = parser("python benchmarks/ray_serve two-hosts", __doc__)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.driver:
        print("RESULT " + json.dumps(driver(args)))
        return 0
    # a private Ray temp dir: `ray start` records its address in <temp>/ray/ray_current_cluster, and in
    # the shared /tmp/ray every other ray.init() on the machine would try to join this cluster
    tmp = tempfile.mkdtemp(prefix="ps2h-")
    env = {
        **os.environ,
        "RAY_TMPDIR": tmp,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    }
    ray_cli = str(Path(sys.executable).parent / "ray")
    setup()
    res: dict = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": f"python benchmarks/ray_serve two-hosts --requests {args.requests}",
    }
    try:
        run(
            ray_cli,
            "start",
            "--head",
            f"--node-ip-address={IPS[0]}",
            "--port=6379",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            ns=NS[0],
            env=env,
        )
        run(
            ray_cli,
            "start",
            f"--address={IPS[0]}:6379",
            f"--node-ip-address={IPS[1]}",
            "--num-cpus=1",
            "--disable-usage-stats",
            ns=NS[1],
            env=env,
        )
        out = run(
            sys.executable,
            __file__,
            "--driver",
            "--requests",
            str(args.requests),
            "--model",
            args.model,
            ns=NS[0],
            env=env,
            timeout=900,
        )
        res["driver"] = json.loads(
            [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1][7:]
        )
    finally:
        res["teardown"] = teardown()
        shutil.rmtree(tmp, ignore_errors=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "two_hosts.json").write_text(json.dumps(res, indent=1))
    (out_dir / "two_hosts.md").write_text(summary(res))
    print(summary(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
