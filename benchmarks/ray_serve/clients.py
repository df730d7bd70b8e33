"""The clients of load.py (benchmarks/ray_serve): streamed (httpx) and whole (the official openai client)
chat requests, a bounded load run, and the Serve overhead probes, against any OpenAI-compatible
URL (a `paraspec serve` or a Ray Serve app)."""

from __future__ import annotations

import asyncio
import math
import socket
import time

import httpx
import openai

from serving import sse_chunks

REQUEST_TIMEOUT_S = 300.0


def pct(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no samples."""
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, min(len(s), math.ceil(q / 100 * len(s))) - 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ms(x: float | None) -> float | None:
    return None if x is None else round(1000 * x, 2)


# ====================================================================================== clients


async def stream_one(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    """One streamed chat request: latency, TTFT, each content chunk's arrival, text, tokens, stats."""
    t0 = time.perf_counter()
    times, text, usage, stats = [], [], None, None
    payload = {
        **body,
        "model": "bench",
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async for chunk in sse_chunks(client, url + "/v1/chat/completions", payload):
        for c in chunk.get("choices", []):
            if c["delta"].get("content"):
                times.append(time.perf_counter() - t0)
                text.append(c["delta"]["content"])
        ext = chunk.get("paraspec") or {}
        if "replica" in ext:  # the sample's own stats (the last chunk sums the choices)
            stats = ext
        elif "decode_steps" in ext and stats is None:
            stats = ext
        usage = chunk.get("usage") or usage
    return {
        "latency_s": time.perf_counter() - t0,
        "ttft_s": times[0] if times else None,
        "chunk_times": times,
        "text": "".join(text),
        "tokens": usage["completion_tokens"] if usage else 0,
        "stats": stats or {},
    }


async def whole_one(client: openai.AsyncOpenAI, body: dict) -> dict:
    """One non-streaming chat request through the official openai client."""
    t0 = time.perf_counter()
    r = await client.chat.completions.create(model="bench", temperature=0, **body)
    ext = (r.model_extra or {}).get("paraspec") or {}
    choice = (ext.get("choices") or [{}])[0]
    return {
        "latency_s": time.perf_counter() - t0,
        "ttft_s": None,
        "text": r.choices[0].message.content or "",
        "tokens": r.usage.completion_tokens,
        "stats": {
            **choice,
            "decode_steps": ext.get("decode_steps", 0),
            "mean_accepted_tokens_per_step": ext.get("mean_accepted_tokens_per_step", 0.0),
        },
    }


async def run_load(
    url: str, bodies: list[dict], concurrency: int, stream: bool, budget_s: float
) -> dict:
    """Every body, at most `concurrency` at once; failures are counted, not raised. Bounded by budget_s."""
    sem = asyncio.Semaphore(concurrency)
    async with (
        httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as hc,
        openai.AsyncOpenAI(
            base_url=url + "/v1", api_key="none", max_retries=0, timeout=REQUEST_TIMEOUT_S
        ) as oc,
    ):

        async def one(body):
            async with sem:
                try:
                    return await (stream_one(hc, url, body) if stream else whole_one(oc, body))
                except Exception as e:  # a failed request is a result here
                    return {"error": f"{type(e).__name__}: {e}"[:200]}

        t0 = time.perf_counter()
        results = await asyncio.wait_for(asyncio.gather(*[one(b) for b in bodies]), budget_s)
        wall = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    steps = sum(r["stats"].get("decode_steps", 0) for r in ok)
    emitted = sum(
        r["stats"].get("mean_accepted_tokens_per_step", 0) * r["stats"].get("decode_steps", 0)
        for r in ok
    )
    lat = [r["latency_s"] for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    return {
        "mode": "stream" if stream else "whole",
        "concurrency": concurrency,
        "requests": len(bodies),
        "errors": len(results) - len(ok),
        "wall_s": round(wall, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 2),
        "p50_latency_s": round(pct(lat, 50) or 0, 4),
        "p99_latency_s": round(pct(lat, 99) or 0, 4),
        "p50_ttft_s": round(pct([r["ttft_s"] for r in ok if r["ttft_s"] is not None], 50) or 0, 4)
        if stream
        else None,
        "tokens_per_step": round(emitted / steps, 3) if steps else None,
        "replicas": sorted(
            {str(r["stats"].get("replica")) for r in ok if r["stats"].get("replica")}
        ),
        "texts": [r.get("text") for r in results],
        "first_errors": [r["error"] for r in results if "error" in r][:3],
        "per_request": [
            {
                "latency_s": round(r["latency_s"], 3),
                "tokens": r["tokens"],
                "tokens_per_step": r["stats"].get("mean_accepted_tokens_per_step"),
                "replica": r["stats"].get("replica"),
            }
            for r in ok
        ],
    }


async def probes(urls: dict[str, str], n_trivial: int, n_stream: int, chunk_tokens: int) -> dict:
    """Serve overhead probes, one request at a time, the systems in turns (order flipped each round):
    a 1-token completion (non-streaming), and streams of plain decoding (one token a chunk) whose
    gaps between chunks are the per-chunk cost."""
    names = list(urls)
    trivial: dict[str, list] = {n: [] for n in names}
    gaps: dict[str, list] = {n: [] for n in names}
    ttfts: dict[str, list] = {n: [] for n in names}
    body = {
        "messages": [
            {"role": "user", "content": "Count from one to fifty in words, comma separated."}
        ],
        "max_tokens": chunk_tokens,
        "paraspec": {"plugin_params": "none"},
    }
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as hc:
        for i in range(n_trivial + 2):  # 2 warm-ups
            for name in names if i % 2 else names[::-1]:
                t0 = time.perf_counter()
                r = await hc.post(
                    urls[name] + "/v1/completions",
                    json={"model": "bench", "prompt": "Hi", "max_tokens": 1, "temperature": 0},
                )
                r.raise_for_status()
                if i >= 2:
                    trivial[name].append(time.perf_counter() - t0)
        for i in range(n_stream):
            for name in names if i % 2 else names[::-1]:
                r = await stream_one(hc, urls[name], body)
                t = r["chunk_times"]
                gaps[name] += [b - a for a, b in zip(t, t[1:])]
                ttfts[name].append(r["ttft_s"])
    return {
        n: {
            "trivial_p50_ms": ms(pct(trivial[n], 50)),
            "trivial_p99_ms": ms(pct(trivial[n], 99)),
            "trivial_n": len(trivial[n]),
            "stream_ttft_p50_ms": ms(pct(ttfts[n], 50)),
            "chunk_gap_p50_ms": ms(pct(gaps[n], 50)),
            "chunk_gap_p90_ms": ms(pct(gaps[n], 90)),
            "chunks": len(gaps[n]) + n_stream,
        }
        for n in names
    }
