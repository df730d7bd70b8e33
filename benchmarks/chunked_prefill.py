"""Streaming under long-prompt arrivals: inter-token latency of running requests with and without
chunked prefill, and short-request throughput at c = 1/4/8, side by side in one run.

    python benchmarks/chunked_prefill.py                          # bundled model: chunk 8192 (= off) vs 256
    python benchmarks/chunked_prefill.py --baseline-src ../wt-old/src   # + the server of another checkout
    python benchmarks/chunked_prefill.py --tiny --seconds 8       # smoke run

Each system is a fresh `paraspec serve` process (same model, numerics and config but prefillChunkSize):
  * ITL phase: `--streams` short greedy chat requests stream back to back for `--seconds`, while a
    completion with a `--long-tokens`-token prompt (new text each time) arrives every `--long-every` s.
    Inter-token latency = the gap between two content chunks of a short stream (TTFT excluded);
    with prefillChunkSize 8192 a 2k prompt is one forward, as before chunked prefill.
  * Head-of-line phase: one completion request of 100 prompts x n=4 (8 tokens each), and 2 s later
    a 4-token chat request: the small request's latency, and alone for reference.
  * Throughput phase: `--requests` short greedy chat requests at each concurrency, no long prompts.
Greedy texts of the short requests must be identical across systems (the schedule never changes tokens).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving  # noqa: E402  (benchmarks/serving.py: config writer, server process, load generator)

SHORT = [
    "Write a haiku about autumn.",
    "List three uses of a paperclip.",
    "Explain recursion in two sentences.",
    "What is the capital of France? Answer in one sentence.",
    "Give me a Python one-liner to reverse a string.",
    "Name four planets.",
    "Describe a cat to someone who has never seen one.",
    "Suggest a name for a bakery.",
]
WORDS = (
    "river stone market window garden letter engine silver morning pattern harbor thread candle "
    "valley number orange signal forest bridge paper"
).split()


def long_prompt(i: int, tokens: int) -> str:
    """~`tokens` tokens of fresh text (a trie or cache never saw it): random words, seed i."""
    rng = random.Random(i)
    return "Summarise this log:\n" + " ".join(rng.choice(WORDS) for _ in range(tokens))


async def stream_chat(client: httpx.AsyncClient, url: str, content: str, max_tokens: int) -> dict:
    body = {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    t0 = time.perf_counter()
    arrivals, text = [], []
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk.get("choices", []):
                if c["delta"].get("content"):
                    arrivals.append(time.perf_counter())
                    text.append(c["delta"]["content"])
    return {
        "ttft": arrivals[0] - t0 if arrivals else None,
        "gaps": [b - a for a, b in zip(arrivals, arrivals[1:])],
        "text": "".join(text),
        "content": content,
    }


async def itl_phase(url: str, args) -> dict:
    stop = time.perf_counter() + args.seconds
    gaps: list[float] = []
    texts: dict[str, str] = {}
    long_ttft: list[float] = []
    short_ttft: list[float] = []

    async def streamer(k: int, client: httpx.AsyncClient) -> None:
        i = k
        while time.perf_counter() < stop:
            r = await stream_chat(client, url, SHORT[i % len(SHORT)], args.short_tokens)
            gaps.extend(r["gaps"])
            short_ttft.append(r["ttft"])
            texts[r["content"]] = r["text"]
            i += args.streams

    async def arrivals(client: httpx.AsyncClient) -> None:
        i = 0
        await asyncio.sleep(1.0)  # the streams are running first
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            r = await client.post(
                url + "/v1/completions",
                json={
                    "prompt": long_prompt(i, args.long_tokens),
                    "max_tokens": 4,
                    "temperature": 0,
                },
            )
            r.raise_for_status()
            long_ttft.append(time.perf_counter() - t0)
            i += 1
            await asyncio.sleep(max(0.0, args.long_every - (time.perf_counter() - t0)))

    async with httpx.AsyncClient(timeout=None) as client:
        await asyncio.gather(arrivals(client), *[streamer(k, client) for k in range(args.streams)])
    gaps.sort()

    def pct(p: float) -> float:
        return (
            round(gaps[min(len(gaps) - 1, int(p * len(gaps)))] * 1000, 1) if gaps else float("nan")
        )

    return {
        "itl_ms": {"p50": pct(0.50), "p90": pct(0.90), "p99": pct(0.99), "max": pct(1.0)},
        "chunks": len(gaps),
        "long_requests": len(long_ttft),
        "long_latency_s": round(statistics.median(long_ttft), 3) if long_ttft else None,
        "short_ttft_p90_s": round(sorted(short_ttft)[int(0.9 * len(short_ttft))], 3)
        if short_ttft
        else None,
        "texts": texts,
    }


async def head_of_line(url: str) -> dict:
    small = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    big = {
        "prompt": [f"Item {i}: a short line of text about number {i}." for i in range(100)],
        "n": 4,
        "max_tokens": 8,
        "temperature": 0.8,
        "seed": 1,
    }
    async with httpx.AsyncClient(timeout=None) as client:
        t0 = time.perf_counter()
        (await client.post(url + "/v1/chat/completions", json=small)).raise_for_status()
        alone = time.perf_counter() - t0
        big_task = asyncio.create_task(client.post(url + "/v1/completions", json=big))
        await asyncio.sleep(2.0)
        t0 = time.perf_counter()
        (await client.post(url + "/v1/chat/completions", json=small)).raise_for_status()
        behind = time.perf_counter() - t0
        (await big_task).raise_for_status()
    return {"small_alone_s": round(alone, 3), "small_behind_big_s": round(behind, 3)}


def systems(args) -> list[tuple[str, dict, list[str]]]:
    """(name, environment, extra config) per system."""
    here = str(Path(__file__).resolve().parents[1] / "src")
    out = []
    for size in args.chunk_sizes.split(","):
        name = "no chunking" if int(size) >= 8192 else f"chunk {size}"
        out.append((name, {"PYTHONPATH": here}, int(size)))
    if args.baseline_src:
        out.append(
            (
                f"baseline ({args.baseline_src})",
                {"PYTHONPATH": str(Path(args.baseline_src).resolve())},
                None,
            )
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model (smoke run)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--chunk-sizes", default="8192,256", help="prefillChunkSize per system (8192: no chunking)"
    )
    ap.add_argument(
        "--baseline-src",
        default=None,
        help="also run the server from this src folder (its defaults)",
    )
    ap.add_argument(
        "--streams", type=int, default=4, help="short requests streaming at once in the ITL phase"
    )
    ap.add_argument("--short-tokens", type=int, default=64)
    ap.add_argument("--long-tokens", type=int, default=2000)
    ap.add_argument(
        "--long-every", type=float, default=4.0, help="seconds between long-prompt arrivals"
    )
    ap.add_argument("--seconds", type=float, default=40.0, help="length of the ITL phase")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument(
        "--plugin-params", default=None, help="plugin_params for every system (default: plain AR)"
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="paraspec-chunked-"))
    model = args.model
    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from tiny_models import make_tiny_model

        model = str(make_tiny_model(work / "tiny", "llama", n_layers=2, hidden=64))
        args.long_tokens = min(args.long_tokens, 120)  # words; one token per byte here: ~800 tokens
    short_requests = [
        {
            "messages": [{"role": "user", "content": SHORT[i % len(SHORT)]}],
            "max_tokens": args.short_tokens,
        }
        for i in range(args.requests)
    ]
    levels = [int(c) for c in args.concurrency.split(",")]
    results = {
        "model": model,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "systems": {},
    }
    for name, env, chunk in systems(args):
        port = serving.free_port()
        config = serving.write_config(work, model, port, args.plugin_params, 8)
        if chunk is not None:
            raw = json.loads(config.read_text())
            raw["BackendConfig"]["ScheduleConfig"]["prefillChunkSize"] = chunk
            config.write_text(json.dumps(raw))
        cmd = [
            sys.executable,
            "-m",
            "paraspec.cli",
            "serve",
            "--config",
            str(config),
            "--dtype",
            args.dtype,
        ]
        cmd += ["--threads", str(args.threads)] if args.threads else []
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with serving.ServerProcess(cmd, port) as server:
                r = {
                    "itl": asyncio.run(itl_phase(server.url, args)),
                    "throughput": {},
                    "head_of_line": asyncio.run(head_of_line(server.url)),
                }
                for c in levels:
                    run = asyncio.run(serving.run_load(server.url, short_requests, c))
                    r["throughput"][c] = {
                        "tokens_per_s": run["tokens_per_s"],
                        "texts": run["texts"],
                    }
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        results["systems"][name] = r
        itl = r["itl"]["itl_ms"]
        print(
            f"{name:24s} ITL p50 {itl['p50']} ms p99 {itl['p99']} ms max {itl['max']} ms; "
            f"long latency {r['itl']['long_latency_s']} s; small request behind a 400-sequence one "
            f"{r['head_of_line']['small_behind_big_s']} s (alone {r['head_of_line']['small_alone_s']} s); tok/s "
            + " ".join(f"c{c}={r['throughput'][c]['tokens_per_s']}" for c in levels),
            file=sys.stderr,
        )
    report(results, levels)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


def report(results: dict, levels: list[int]) -> None:
    runs = results["systems"]
    print(f"\nmodel {results['model']}; {results['machine']}")
    print(
        "\n| system | ITL p50 ms | ITL p90 ms | ITL p99 ms | ITL max ms | long prompt latency s | short TTFT p90 s | "
        "4-token request behind 100x4 s (alone) | "
        + " | ".join(f"tok/s c={c}" for c in levels)
        + " |"
    )
    print("|---" * (8 + len(levels)) + "|")
    for name, r in runs.items():
        i = r["itl"]
        print(
            f"| {name} | {i['itl_ms']['p50']} | {i['itl_ms']['p90']} | {i['itl_ms']['p99']} | {i['itl_ms']['max']} "
            f"| {i['long_latency_s']} | {i['short_ttft_p90_s']} | {r['head_of_line']['small_behind_big_s']} "
            f"({r['head_of_line']['small_alone_s']}) | "
            + " | ".join(str(r["throughput"][c]["tokens_per_s"]) for c in levels)
            + " |"
        )
    names = list(runs)
    ref = runs[names[0]]
    for name in names[1:]:
        same = all(
            runs[name]["throughput"][c]["texts"] == ref["throughput"][c]["texts"] for c in levels
        )
        print(f"greedy texts of {name!r} == {names[0]!r}: {same}")


if __name__ == "__main__":
    sys.exit(main())
