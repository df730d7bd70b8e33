"""Load and soak: N users replaying ShareGPT conversations against `paraspec serve` (and llama.cpp's
llama-server on the same file and load) with the official openai client, for minutes per level.

    python benchmarks/load_soak.py                          # 1, 4, 16, 64 users, 600 s each
    python benchmarks/load_soak.py --clients 1,4 --duration 60 --threads 1 --systems paraspec-md
    python benchmarks/load_soak.py --url http://127.0.0.1:1025 --pid 1234 --clients 16

Each system and user count gets a fresh server (paraspec-ar: `--plugin none`; paraspec-md:
memory_decoding, paraspec-hybrid: hybrid, each with its defaults in the config file; llamaserver:
`.venv/bin/llama-server`, one slot per user, `make peers` builds it). Users replay conversations
turn by turn (load_clients.py says how), all greedy; --cancel-share of the requests are streamed
and closed by the user after 1-3 chunks of their answer, --stream-share of the others streamed.
With --url the paraspec systems share that server and pick their decoding per request
(`paraspec.plugin_params`); --pid names its process for the RSS samples.

The rule, per paraspec system and level (the exit status is 1 if any is broken): no 5xx but the
documented overload answer (a 503 with code server_busy, counted apart), no error event in a
stream, no request without an answer within --timeout; afterwards the server is idle and healthy
and a greedy canary is unchanged; --exact-sample of the completed answers sent again alone, one
at a time, give the same text, token count and finish reason; a server started here exits 0 on
SIGTERM and logged no traceback. Reported beside it: p50/p99 time to first token (streamed
answers), decode tokens/s (p50 over streamed answers) and tokens/s per user (median and lowest),
the server's RSS sampled every --rss-every s and its least-squares slope in MB/min after the
warm-up (--warmup). llama-server's rows get the same checks, reported, not ruled: its batched
decoding is not promised to be batch-invariant. Writes results.json and report.md into --out.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx


# fuzz_server.py by its path (benchmarks/ on sys.path would shadow `kernels`), then its loader for the rest
_spec = importlib.util.spec_from_file_location(
    "fuzz_server", Path(__file__).with_name("fuzz_server.py")
)
# its canary, idle check, SIGTERM stop
sys.modules["fuzz_server"] = fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)
users = fuzz._load("load_clients")

PLUGINS = {
    "paraspec-ar": None,
    "paraspec-md": {"plugin_type": "memory_decoding"},
    "paraspec-hybrid": {"plugin_type": "hybrid"},
}
SYSTEMS = (*PLUGINS, "llamaserver")
START_S = 600.0  # a guard for loading a model, not a measurement


@dataclass
class Server:
    system: str
    url: str
    proc: subprocess.Popen | None = None
    log: Path | None = None
    pid: int | None = None
    extra_body: dict | None = None  # per-request decoding, for a --url server
    model: str = ""


# ------------------------------------------------------------------------------------ servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, path: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_S
    while True:
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(
                f"the server did not start:\n{log.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(0.2)


def start_paraspec(system: str, args, clients: int, work: Path) -> Server:
    port = free_port()
    model = {"modelName": "soak", "modelWeightPath": args.model}
    if PLUGINS[system]:
        model["plugin_params"] = PLUGINS[system]
    config = work / f"{system}-{clients}.json"
    config.write_text(
        json.dumps(
            {
                "ServerConfig": {"port": port, "maxLinkNum": args.max_link_num},
                "BackendConfig": {
                    "ModelDeployConfig": {
                        "maxSeqLen": args.context,
                        "maxInputTokenLen": args.context - args.max_tokens,
                        "ModelConfig": [model],
                    },
                    # + 64: room for a dynamic_algo drafter's speculationGamma (config.py's MindIE rule)
                    "ScheduleConfig": {
                        "maxBatchSize": min(256, args.max_batch or clients),
                        "maxIterTimes": args.max_tokens + 64,
                    },
                },
            }
        )
    )
    cmd = [sys.executable, "-m", "paraspec.cli", "serve", "--config", str(config)]
    cmd += (
        (["--plugin", "none"] if PLUGINS[system] is None else [])
        + ["--dtype", args.dtype]
        + (["--threads", str(args.threads)] if args.threads else [])
    )
    log = work / f"{system}-{clients}.log"
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    server = Server(system, f"http://127.0.0.1:{port}", proc, log, proc.pid)
    _wait(server.url, "/ready", proc, log)
    return server


def start_llamaserver(args, clients: int, work: Path) -> Server:
    from paraspec.bench import llama_server as ls
    from paraspec.model.loader import resolve_model_path

    binary, why = ls.find_binary()
    if binary is None:
        raise RuntimeError(why)
    path = resolve_model_path(args.model)
    if path.suffix != ".gguf":
        raise RuntimeError(f"llama-server needs a .gguf model, got {path}")
    port = free_port()
    # the bench's command, but one slot of --context tokens per user (it runs one request at a time)
    threads = args.threads or os.cpu_count() or 1
    cmd = ls.server_command(binary, path, port, threads, args.context * clients, ())
    cmd[cmd.index("-np") + 1] = str(clients)
    log = work / f"llamaserver-{clients}.log"
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=ls._die_with_parent,
    )
    ls._LIVE.add(proc)
    server = Server("llamaserver", f"http://127.0.0.1:{port}", proc, log, proc.pid)
    _wait(server.url, "/health", proc, log)
    return server


def stop(server: Server) -> list[str]:
    if server.proc is None:
        return []
    if server.system == "llamaserver":
        from paraspec.bench import llama_server as ls

        ls._stop(server.proc)
        return []
    return fuzz.stop_server(server.proc, server.log)


def served_model(url: str, api_key: str | None) -> str:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.get(url + "/v1/models", headers=headers, timeout=60).json()["data"][0]["id"]


def request_outcomes(url: str, api_key: str | None) -> dict[str, float]:
    """paraspec_requests_total by outcome, from /metrics (aborted: the streams the users closed)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    text = httpx.get(url + "/metrics", headers=headers, timeout=60).text
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r'^paraspec_requests_total\{[^}]*outcome="(\w+)"[^}]*\} (\S+)', text, re.M
        )
    }


# ------------------------------------------------------------------------------------ one level


@dataclass
class Level:
    system: str
    clients: int
    result: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # the rule broken
    ruled: bool = True  # paraspec: problems fail the run


def run_level(system: str, clients: int, args, plan, work: Path) -> Level:
    level = Level(system, clients, ruled=system != "llamaserver")
    try:
        if args.url and system != "llamaserver":
            plugin = PLUGINS[system] or {"plugin_type": "none"}
            server = Server(
                system, args.url, pid=args.pid, extra_body={"paraspec": {"plugin_params": plugin}}
            )
        else:
            server = (
                start_llamaserver(args, clients, work)
                if system == "llamaserver"
                else start_paraspec(system, args, clients, work)
            )
    except (RuntimeError, ValueError) as e:
        level.result["skipped"] = str(e).splitlines()[0] if system == "llamaserver" else str(e)
        if system != "llamaserver":
            level.problems.append(f"not started: {e}")
        return level
    paraspec = system != "llamaserver"
    try:
        server.model = served_model(server.url, args.api_key)
        canary = fuzz.canary(server.url, args.api_key) if paraspec else None
        before = request_outcomes(server.url, args.api_key) if paraspec else {}
        sampler = users.RssSampler(server.pid, args.rss_every)
        sampler.start()
        t0 = time.perf_counter()
        records = asyncio.run(
            users.run_users(
                server.url,
                server.model,
                plan,
                clients,
                args.duration or None,
                args.requests,
                args.timeout,
                server.extra_body,
                args.api_key,
            )
        )
        wall = time.perf_counter() - t0
        warmup = args.warmup if args.warmup is not None else wall / 4
        level.result.update(
            users.figures(records, wall),
            wall_s=round(wall, 1),
            warmup_s=round(warmup, 1),
            rss=users.rss_figures(sampler.stop(), warmup),
            errors=sorted(
                {f"{r.outcome} {r.detail}" for r in records if r.outcome not in ("ok", "cancelled")}
            )[:20],
        )
        level.problems += users.rule_breaks(records)
        if paraspec:
            level.problems += fuzz.after_the_fuzz(
                server.url, canary, args.api_key, wait_s=args.timeout
            )
            after = request_outcomes(server.url, args.api_key)
            level.result["server_outcomes"] = {
                k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)
            }
        sample = users.exact_sample(records, args.exact_sample)
        mismatches = asyncio.run(
            users.solo(
                server.url, server.model, sample, args.timeout, server.extra_body, args.api_key
            )
        )
        level.problems += mismatches
        level.result["exact"] = {"checked": len(sample), "mismatches": len(mismatches)}
    except (
        httpx.HTTPError,
        OSError,
        KeyError,
        ValueError,
    ) as e:  # the server went away or broke its API
        level.problems.append(f"the server stopped answering: {type(e).__name__}: {e}")
    finally:
        level.problems += stop(server)
    return level


# ------------------------------------------------------------------------------------ the run


def report_md(results: dict) -> str:
    lines = [
        f"# Load and soak: {results['model']}",
        "",
        f"{results['data']}; greedy, max_tokens <= {results['max_tokens']}, "
        f"{results['stream_share']:g} streamed, {results['cancel_share']:g} closed mid-stream, "
        f"threads {results['threads'] or 'default'}, "
        f"{results['duration_s'] or '-'} s per level"
        + (f", {results['requests']} requests a user" if results["requests"] else ""),
        "",
        "| system | users | requests | ok | cancelled | overload | 4xx | broken | exact "
        "| TTFT p50 / p99 s | decode tok/s p50 | tok/s per user (median, min) | total tok/s "
        "| RSS MB start, end | RSS slope MB/min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in results["levels"]:
        r = lv["result"]
        if "skipped" in r:
            lines.append(
                f"| {lv['system']} | {lv['clients']} | skipped: {r['skipped']} |" + " |" * 12
            )
            continue
        o, rss, ex = r.get("outcomes", {}), r.get("rss") or {}, r.get("exact", {})
        broken = sum(o.get(k, 0) for k in ("5xx", "stream_error", "timeout", "connection"))
        lines.append(
            f"| {lv['system']} | {lv['clients']} | {r.get('requests', 0)} | {o.get('ok', 0)} "
            f"| {o.get('cancelled', 0)} | {o.get('overload', 0)} | {o.get('4xx', 0)} | {broken} "
            f"| {ex.get('checked', 0) - ex.get('mismatches', 0)}/{ex.get('checked', 0)} "
            f"| {r.get('ttft_p50_s')} / {r.get('ttft_p99_s')} | {r.get('decode_tokens_per_s_p50')} "
            f"| {r.get('client_tokens_per_s_median')}, {r.get('client_tokens_per_s_min')} "
            f"| {r.get('tokens_per_s')} "
            f"| {rss.get('start_mb')}, {rss.get('end_mb')} | {rss.get('slope_mb_per_min')} |"
        )
    problems = [(lv, p) for lv in results["levels"] for p in lv["problems"]]
    lines += ["", "Rule broken:" if problems else "No rule broken."]
    lines += [
        f"- {lv['system']} x {lv['clients']}{'' if lv['ruled'] else ' (peer, reported)'}: {p}"
        for lv, p in problems
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        default="default",
        help="a .gguf, a Hugging Face folder, 'default' (bundled) or a fetched name "
        "(qwen2.5-coder-0.5b)",
    )
    p.add_argument(
        "--systems", default="paraspec-ar,paraspec-md,llamaserver", help=f"of {', '.join(SYSTEMS)}"
    )
    p.add_argument("--clients", default="1,4,16,64", help="users at once, one level each")
    p.add_argument(
        "--duration", type=float, default=600.0, help="seconds per level (0: --requests alone)"
    )
    p.add_argument("--requests", type=int, default=None, help="at most this many requests a user")
    p.add_argument("--stream-share", type=float, default=0.5)
    p.add_argument("--cancel-share", type=float, default=0.1)
    p.add_argument(
        "--max-tokens",
        type=int,
        default=128,
        help="a request's cap (less where the data's answer is short)",
    )
    p.add_argument(
        "--prompt-chars", type=int, default=4500, help="a prompt's characters, history included"
    )
    p.add_argument(
        "--context",
        type=int,
        default=2048,
        help="tokens per request: maxSeqLen, llama-server's slot",
    )
    p.add_argument("--max-batch", type=int, default=None, help="maxBatchSize (default: the users)")
    p.add_argument(
        "--max-link-num", type=int, default=1000, help="maxLinkNum: more at once get the 503"
    )
    p.add_argument(
        "--data",
        default="sharegpt",
        help="sharegpt (its eval split), chat, or a ShareGPT-format JSON file",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="paraspec serve's --dtype",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="each server's threads (default: all cores)"
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="the client's timeout: past it, a hang"
    )
    p.add_argument(
        "--exact-sample", type=int, default=64, help="answers re-run alone per level (0: all)"
    )
    p.add_argument(
        "--warmup", type=float, default=None, help="seconds before the RSS slope (default: 1/4)"
    )
    p.add_argument("--rss-every", type=float, default=2.0)
    p.add_argument(
        "--url", default=None, help="a paraspec serve already running (decoding chosen per request)"
    )
    p.add_argument("--pid", type=int, default=None, help="with --url: its process id, for RSS")
    p.add_argument("--api-key", default=os.environ.get("PARASPEC_API_KEY"))
    p.add_argument("--out", default="load-soak", help="folder for results.json and report.md")
    args = p.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if bad := [s for s in systems if s not in SYSTEMS]:
        p.error(f"--systems: unknown {', '.join(bad)}; choose from {', '.join(SYSTEMS)}")
    try:
        levels = [int(c) for c in args.clients.split(",")]
    except ValueError:
        p.error(f"--clients must be numbers separated by commas, got {args.clients!r}")
    if min(levels) < 1 or not args.duration and not args.requests:
        p.error("--clients must be >= 1, and --duration or --requests must bound each level")
    if not 0 <= args.cancel_share <= 1 or not 0 <= args.stream_share <= 1:
        p.error("--cancel-share and --stream-share are shares from 0 to 1")
    if args.context <= args.max_tokens:
        p.error(f"--context ({args.context}) must be above --max-tokens ({args.max_tokens})")
    if args.data not in ("sharegpt", "chat") and not Path(args.data).is_file():
        p.error(
            f"--data {args.data}: no such file; use sharegpt, chat or a ShareGPT-format JSON file"
        )
    if not args.url or "llamaserver" in systems:
        from paraspec.model.loader import resolve_model_path

        try:
            resolve_model_path(args.model)
        except ValueError as e:  # ModelLoadError: says what to pass
            p.error(f"--model: {e}")
    args.systems, args.levels, args.url = (
        systems,
        levels,
        args.url.rstrip("/") if args.url else None,
    )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:  # a data file that does not parse (datasets.DataFileError) or holds no usable turn
        convs, source = users.conversations(args.data, args.seed)
        plan = users.Plan(
            convs,
            args.prompt_chars,
            args.max_tokens,
            args.stream_share,
            args.cancel_share,
            args.seed,
        )
    except ValueError as e:
        print(f"load_soak.py: --data {args.data}: {e}", file=sys.stderr)
        return 2
    results = {
        "model": args.url or args.model,
        "data": source,
        "max_tokens": args.max_tokens,
        "stream_share": args.stream_share,
        "cancel_share": args.cancel_share,
        "threads": args.threads,
        "duration_s": args.duration,
        "requests": args.requests,
        "seed": args.seed,
        "levels": [],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"{len(convs)} conversations ({source}); systems {args.systems}, users {args.levels}",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="paraspec-soak-") as tmp:
        for system in args.systems:
            for clients in args.levels:
                lv = run_level(system, clients, args, plan, Path(tmp))
                results["levels"].append(vars(lv))
                r = lv.result
                print(
                    f"{system} x {clients}: "
                    + (
                        f"skipped: {r['skipped']}"
                        if "skipped" in r
                        else f"{r.get('outcomes')} exact {r.get('exact')} TTFT p50 {r.get('ttft_p50_s')} s, "
                        f"RSS slope {(r.get('rss') or {}).get('slope_mb_per_min')} MB/min"
                    )
                    + "".join(f"\n  BROKEN: {p}" for p in lv.problems),
                    file=sys.stderr,
                )
                (out / "results.json").write_text(json.dumps(results, indent=1))
    report = report_md(results)
    (out / "report.md").write_text(report)
    print(report)
    return int(any(lv["problems"] and lv["ruled"] for lv in results["levels"]))


if __name__ == "__main__":
    sys.exit(main())
