"""Serving benchmark: paraspec's HTTP server with parallel decoding vs plain AR vs transformers, one run.

    python benchmarks/serving.py                        # bundled SmolLM2, grounded chat tasks, c = 1, 4, 8
    python benchmarks/serving.py --tiny                 # a tiny random model, seconds (smoke test)
    python benchmarks/serving.py --concurrency 1,4 --requests 16 --max-tokens 128 --out serving.json

Each system gets a fresh server process (so memory_decoding's trie starts empty at each concurrency),
and the same greedy requests through the same streaming load generator (httpx, SSE):
  * paraspec-pd   `paraspec serve` with the plugin (memory_decoding unless --plugin-params says otherwise)
  * paraspec-ar   `paraspec serve` with plain autoregressive decoding
  * transformers  a minimal server in this file: transformers `generate`, batched (left padding) over the
                  requests waiting when the model is free, greedy, the same prompt token ids; its answer
                  arrives as one chunk, so its TTFT is its latency
Offline: the same requests through `LLM.chat` one at a time, for the c = 1 latency comparison.
Claims checked at the end (issue: serving): c=1 server latency within 10 % of offline; at c=4 and 8,
paraspec-pd tokens/s >= paraspec-ar and > transformers. Greedy outputs of pd and ar must match.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import AsyncIterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
from starlette.requests import Request  # noqa: E402  (module level: FastAPI resolves the annotation here)

SYSTEMS = ("paraspec-pd", "paraspec-ar", "transformers")


# ====================================================================================== requests


def load_requests(args) -> list[dict]:
    """Chat requests: the grounded task set (copy/edit-heavy, where parallel decoding pays) or, with
    --tiny, short prompts for a random model."""
    if args.tiny:
        texts = [
            "hello world",
            "def f(x):\n    return",
            "The quick brown fox",
            "aaaa bbbb aaaa bbbb",
        ]
        return [
            {
                "messages": [{"role": "user", "content": texts[i % len(texts)] + f" #{i}"}],
                "max_tokens": args.max_tokens or 32,
            }
            for i in range(args.requests)
        ]
    from paraspec.bench.tasks import load_task_set

    out = []
    for t in load_task_set(args.tasks, args.requests, seed=0):
        messages = t.messages or [{"role": "user", "content": t.prompt}]
        out.append(
            {"messages": messages, "max_tokens": min(t.max_new_tokens, args.max_tokens or 10**9)}
        )
    return out


async def sse_chunks(client: httpx.AsyncClient, url: str, payload: dict) -> AsyncIterator[dict]:
    """The JSON chunks of one streamed (SSE) request; an error chunk raises."""
    async with client.stream("POST", url, json=payload) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            yield chunk


async def run_load(url: str, requests: list[dict], concurrency: int) -> dict:
    """Send every request (at most `concurrency` at once), streaming; per-request latency / TTFT / tokens."""
    sem = asyncio.Semaphore(concurrency)

    async def one(client: httpx.AsyncClient, body: dict) -> dict:
        async with sem:
            t0 = time.perf_counter()
            ttft, text, usage, stats = None, [], None, None
            payload = {
                **body,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async for chunk in sse_chunks(client, url + "/v1/chat/completions", payload):
                for c in chunk.get("choices", []):
                    if c["delta"].get("content"):
                        ttft = ttft or time.perf_counter() - t0
                        text.append(c["delta"]["content"])
                usage, stats = chunk.get("usage") or usage, chunk.get("paraspec") or stats
            return {
                "latency_s": time.perf_counter() - t0,
                "ttft_s": ttft or time.perf_counter() - t0,
                "text": "".join(text),
                "tokens": usage["completion_tokens"] if usage else 0,
                "stats": stats,
            }

    async with httpx.AsyncClient(timeout=None) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*[one(client, b) for b in requests])
        wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    steps = sum((r["stats"] or {}).get("decode_steps", 0) for r in results)
    emitted = sum(
        (r["stats"] or {}).get("mean_accepted_tokens_per_step", 0)
        * (r["stats"] or {}).get("decode_steps", 0)
        for r in results
    )
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "wall_s": round(wall, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 2),
        "mean_latency_s": round(statistics.mean(r["latency_s"] for r in results), 4),
        "median_ttft_s": round(statistics.median(r["ttft_s"] for r in results), 4),
        "accepted_tokens_per_step": round(emitted / steps, 3) if steps else None,
        "texts": [r["text"] for r in results],
    }


# ====================================================================================== servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(
    folder: Path, model: str, port: int, plugin_params: str | None, max_batch: int
) -> Path:
    entry = {"modelName": "bench", "modelWeightPath": model}
    if plugin_params:
        entry["plugin_params"] = plugin_params
    config = {
        "ServerConfig": {"ipAddress": "127.0.0.1", "port": port, "maxLinkNum": 1000},
        "BackendConfig": {
            "ModelDeployConfig": {
                "maxSeqLen": 4096,
                "maxInputTokenLen": 3072,
                "ModelConfig": [entry],
            },
            "ScheduleConfig": {"maxBatchSize": max_batch, "maxIterTimes": 1024},
        },
    }
    path = folder / f"config-{port}.json"
    path.write_text(json.dumps(config))
    return path


class ServerProcess:
    """A server in a child process (its own GIL and threads), ready when /ready answers 200."""

    def __init__(self, cmd: list[str], port: int):
        self.cmd, self.url = cmd, f"http://127.0.0.1:{port}"

    def __enter__(self) -> "ServerProcess":
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited ({self.proc.returncode}): {self.proc.stderr.read()[-2000:]}"
                )
            try:
                if httpx.get(self.url + "/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("server did not become ready in 300 s")

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def paraspec_cmd(args, config: Path) -> list[str]:
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
    return cmd + (["--threads", str(args.threads)] if args.threads else [])


# ---------------------------------------------------------------------------------- transformers server


def hf_serve(args) -> None:
    """The transformers baseline: one worker thread; each time the model is free it takes every waiting
    request (up to --max-batch), left-pads them and runs one greedy `generate` for the batch."""
    import torch
    import transformers
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    from paraspec.model.loader import load_model, resolve_model_path
    from paraspec.model.tokenizer import Tokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    path = resolve_model_path(args.model)
    # the same prompt ids
    tokenizer = Tokenizer.from_source(load_model(str(path), dtype).tokenizer_source)
    if path.suffix == ".gguf":
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=dtype
        )
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model.eval()
    eos = sorted(tokenizer.eos_token_ids)
    pending: list[tuple[list[int], int, asyncio.Future, asyncio.AbstractEventLoop]] = []
    cv = threading.Condition()

    def worker() -> None:
        while True:
            with cv:
                cv.wait_for(lambda: pending)
                batch, pending[:] = pending[: args.max_batch], pending[args.max_batch :]
            width = max(len(ids) for ids, *_ in batch)
            x = torch.tensor([[0] * (width - len(ids)) + ids for ids, *_ in batch])
            mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids, *_ in batch])
            with torch.inference_mode():
                out = model.generate(
                    x,
                    attention_mask=mask,
                    max_new_tokens=max(m for _, m, *_ in batch),
                    do_sample=False,
                    eos_token_id=eos,
                    pad_token_id=eos[0],
                )
            for row, (ids, m, fut, loop) in zip(out[:, width:].tolist(), batch):
                cut = next((i + 1 for i, t in enumerate(row[:m]) if t in eos), m)
                loop.call_soon_threadsafe(fut.set_result, row[:cut])

    threading.Thread(target=worker, daemon=True).start()
    app = FastAPI()

    @app.get("/ready")
    async def ready():
        return {"status": "ready"}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        ids = tokenizer.encode_chat(body["messages"])
        fut = asyncio.get_running_loop().create_future()
        with cv:
            pending.append((ids, body.get("max_tokens", 128), fut, asyncio.get_running_loop()))
            cv.notify()
        tokens = await fut
        text = tokenizer.decode([t for t in tokens if t not in tokenizer.eos_token_ids])

        async def sse():
            yield (
                "data: "
                + json.dumps(
                    {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]}
                )
                + "\n\n"
            )
            yield (
                "data: "
                + json.dumps({"choices": [], "usage": {"completion_tokens": len(tokens)}})
                + "\n\n"
            )
            yield "data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=args.hf_serve, log_level="warning")


# ====================================================================================== main


def offline_latency(args, model: str, requests: list[dict], plugin_params: str | None) -> dict:
    from paraspec import LLM, SamplingParams

    llm = LLM(
        model,
        dtype=args.dtype,
        plugin_params=plugin_params,
        max_batch_size=args.max_batch,
        num_threads=args.threads,
    )
    latencies, texts = [], []
    for r in requests:
        t0 = time.perf_counter()
        out = llm.chat(r["messages"], SamplingParams(temperature=0, max_tokens=r["max_tokens"]))[0]
        latencies.append(time.perf_counter() - t0)
        texts.append(out.text)
    return {"mean_latency_s": round(statistics.mean(latencies), 4), "texts": texts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", default="default", help="a .gguf, a Hugging Face folder, or 'default'"
    )
    ap.add_argument(
        "--tiny", action="store_true", help="a tiny random model: a smoke run in seconds"
    )
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tasks", default="grounded", help="paraspec.bench task set")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=None, help="cap each request's max_tokens")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument(
        "--max-batch", type=int, default=8, help="maxBatchSize (and the transformers batch)"
    )
    ap.add_argument("--plugin-params", default='{"plugin_type": "memory_decoding"}')
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    # internal: the baseline
    ap.add_argument("--hf-serve", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_serve:
        hf_serve(args)
        return 0

    work = Path(tempfile.mkdtemp(prefix="paraspec-serving-"))
    model = args.model
    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from tiny_models import make_tiny_model

        model = str(make_tiny_model(work / "tiny", "llama", n_layers=2, hidden=64))
        args.requests = min(args.requests, 8)
    requests = load_requests(args)
    levels = [int(c) for c in args.concurrency.split(",")]
    systems = args.systems.split(",")
    print(
        f"{len(requests)} requests, concurrency {levels}, systems {systems}, model {model}",
        file=sys.stderr,
    )

    results: dict = {"model": model, "dtype": args.dtype, "requests": len(requests), "runs": {}}
    results["offline"] = offline_latency(args, model, requests, args.plugin_params)
    for system in systems:
        for c in levels:
            port = free_port()
            if system == "transformers":
                cmd = [
                    sys.executable,
                    __file__,
                    "--hf-serve",
                    str(port),
                    "--model",
                    model,
                    "--dtype",
                    args.dtype,
                    "--max-batch",
                    str(args.max_batch),
                ] + (["--threads", str(args.threads)] if args.threads else [])
            else:
                plugin = args.plugin_params if system == "paraspec-pd" else None
                cmd = paraspec_cmd(args, write_config(work, model, port, plugin, args.max_batch))
            try:
                with ServerProcess(cmd, port) as server:
                    run = asyncio.run(run_load(server.url, requests, c))
            except Exception as e:  # e.g. transformers cannot read this model: report and go on
                print(f"{system} c={c}: skipped ({e})", file=sys.stderr)
                continue
            results["runs"][f"{system}@{c}"] = run
            print(
                f"{system:13s} c={c}: {run['tokens_per_s']:8.1f} tok/s  latency {run['mean_latency_s']:.3f} s  "
                f"ttft {run['median_ttft_s']:.3f} s  tokens/step {run['accepted_tokens_per_step']}",
                file=sys.stderr,
            )
    report(results, levels)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


def report(results: dict, levels: list[int]) -> None:
    runs = results["runs"]
    print("\n| system | concurrency | tokens/s | mean latency s | median TTFT s | tokens/step |")
    print("|---|---|---|---|---|---|")
    for key, r in runs.items():
        system = key.split("@")[0]
        print(
            f"| {system} | {r['concurrency']} | {r['tokens_per_s']} | {r['mean_latency_s']} | "
            f"{r['median_ttft_s']} | {r['accepted_tokens_per_step'] or '-'} |"
        )
    off = results["offline"]["mean_latency_s"]
    pd1 = runs.get("paraspec-pd@1")
    if pd1:
        print(
            f"\nc=1 latency: server {pd1['mean_latency_s']} s vs offline {off} s "
            f"({(pd1['mean_latency_s'] / off - 1) * 100:+.1f} %; claim: within 10 %)"
        )
        print("greedy texts server == offline:", pd1["texts"] == results["offline"]["texts"])
    for c in levels:
        pd, ar, hf = (runs.get(f"{s}@{c}") for s in SYSTEMS)
        if pd and ar:
            print(
                f"c={c}: pd {pd['tokens_per_s']} vs ar {ar['tokens_per_s']} tok/s "
                f"({'ok' if pd['tokens_per_s'] >= ar['tokens_per_s'] else 'WORSE'}); "
                f"texts equal: {pd['texts'] == ar['texts']}"
                + (f"; transformers {hf['tokens_per_s']} tok/s" if hf else "")
            )


if __name__ == "__main__":
    sys.exit(main())
