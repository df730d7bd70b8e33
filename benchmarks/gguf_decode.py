"""Greedy AR decode tokens/s on one GGUF file: paraspec gguf (the file's own blocks) vs paraspec
w8a8 (int8 requantised) vs llama.cpp (llama-cpp-python, when installed), side by side.

    python benchmarks/gguf_decode.py [--model default|PATH|q4_k_m] [--tokens 64] [--reps 5] [--threads 2] [--ttft-only]
                                  [--integer-prompt] [--llamacpp-no-repack]

Runs are interleaved rep by rep (system order rotated), so a noisy neighbour on a shared machine
hits every system alike; each cell is the median over reps of the decode tokens/s of a prompt
(tokens after the first over the time after the first), then the median over prompts. Also prints
t(k)/t(1) of one paraspec forward over k tokens on a ~500-token cache, per numerics, and the TTFT
of a 1000-token prompt (--integer-prompt: also gguf-int, gguf with its prompt chunks on the integer
kernel instead of the dense road). CPU flags and load averages are printed: quote ratios, not
absolute numbers, from a shared machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from paraspec import LLM, SamplingParams
from paraspec.model import ggml, kernels
from paraspec.model.gguf_requant import bench_model

PROMPTS = ["def fibonacci(n):", "The history of the Roman Empire", "Write a haiku about the sea.\n",
           "import numpy as np\n\ndef normalize(x):"]


def paraspec_tps(llm: LLM, prompt: str, n: int) -> tuple[float, list[int]]:
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))[0]
    return out.stats["tokens_per_s"], out.token_ids


def llamacpp_tps(llm, ids: list[int], n: int) -> tuple[float, list[int]]:
    out, t0, first = [], time.perf_counter(), None
    llm.reset()
    for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        if first is None:
            first = time.perf_counter()
        out.append(int(tok))
        if len(out) >= n:
            break
    return (len(out) - 1) / (time.perf_counter() - first), out


def t_of_k(llm: LLM, ks=(1, 4, 8, 16), reps: int = 7) -> dict[int, float]:
    """Median ms of one forward over k new tokens on a ~500-token cache (the verify step's cost)."""
    from paraspec.model.transformer import SeqInput
    model = llm.model
    cache = model.new_cache(1024)
    prompt = torch.randint(100, 1000, (500,))
    model.forward(prompt, torch.arange(500), [SeqInput(cache, 500)], prompt=True)
    cache.length = 500
    out = {}
    for k in ks:
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            model.forward(prompt[:k], torch.arange(500, 500 + k), [SeqInput(cache, k)],
                          logits_rows=torch.tensor([k - 1]))
            ts.append(time.perf_counter() - t)
        out[k] = statistics.median(ts) * 1e3
    return out


def llamacpp(model: str, threads: int, repack: bool = True):
    """llama-cpp-python's Llama on the file; repack=False is llama.cpp's --no-repack (no extra
    buffer types: no AMX or repacked weights), which llama-cpp-python does not expose as such.
    Raises ImportError where it is not installed."""
    import llama_cpp.llama as lib
    from llama_cpp import Llama

    from paraspec.model.loader import resolve_model_path
    default = lib.llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = repack
        return p
    lib.llama_cpp.llama_model_default_params = params
    try:
        return Llama(model_path=str(resolve_model_path(model)), n_ctx=2048, n_threads=threads,
                     n_threads_batch=threads, verbose=False)
    finally:
        lib.llama_cpp.llama_model_default_params = default


def decode_table(systems: dict, tok, a: argparse.Namespace) -> None:
    """AR greedy decode tokens/s per system, interleaved rep by rep (module doc)."""
    results: dict[str, dict[int, list[float]]] = {s: {i: [] for i in range(len(PROMPTS))} for s in systems}
    same = {}
    names = list(systems)
    for rep in range(a.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for i, prompt in enumerate(PROMPTS):
            for s in order:
                if s == "llama.cpp":
                    tps, ids = llamacpp_tps(systems[s], tok.encode(prompt), a.tokens)
                else:
                    tps, ids = paraspec_tps(systems[s], prompt, a.tokens)
                results[s][i].append(tps)
                same.setdefault((s, i), ids)
        print(f"rep {rep + 1}/{a.reps} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    med = {s: statistics.median(statistics.median(v) for v in r.values()) for s, r in results.items()}
    print(f"\nAR greedy decode tokens/s, {a.tokens} tokens, {a.threads} threads, median over {a.reps} reps x "
          f"{len(PROMPTS)} prompts:")
    for s, v in med.items():
        ratio = "  ".join(f"{v / med[o]:.2f}x {o}" for o in med if o != s)
        print(f"  {s:10s} {v:7.1f} tok/s   ({ratio})")
    if "llama.cpp" in systems:
        for s in ("gguf", "w8a8"):
            agree = [sum(x == y for x, y in zip(same[(s, i)], same[("llama.cpp", i)])) for i in range(len(PROMPTS))]
            print(f"  greedy tokens equal to llama.cpp's before the first difference ({s}): "
                  + ", ".join(str(next((j for j, (x, y) in enumerate(zip(same[(s, i)], same[('llama.cpp', i)]))
                                        if x != y), len(same[(s, i)]))) for i in range(len(PROMPTS)))
                  + f" of {a.tokens} (same tokens in total: {sum(agree)})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ttft-only", action="store_true", help="only the 1000-token prompt's TTFT, --reps times")
    p.add_argument("--integer-prompt", action="store_true",
                   help="also time TTFT with gguf's prompt chunks on the integer kernel (gguf-int; no dense road)")
    p.add_argument("--llamacpp-no-repack", action="store_true",
                   help="llama.cpp's --no-repack: no AMX / repacked weight buffers (a build whose AMX matmul crashes)")
    a = p.parse_args()
    a.model = bench_model(a.model)
    torch.set_num_threads(a.threads)
    feats = kernels.cpu_features()
    print("cpu flags:", " ".join(f for f in kernels.SHOWN if f in feats), "| kernels:", kernels.default().label)
    systems = {"gguf": LLM(a.model, quantization="gguf"), "w8a8": LLM(a.model, quantization="w8a8")}
    tok = systems["gguf"].tokenizer
    try:
        systems["llama.cpp"] = llamacpp(a.model, a.threads, repack=not a.llamacpp_no_repack)
    except ImportError:
        print("llama-cpp-python not installed: paraspec only")
    if not a.ttft_only:
        decode_table(systems, tok, a)
    long_ids = tok.encode(" ".join(PROMPTS) * 40)[:1000]       # TTFT: a 1000-token prompt, 3 reps (--ttft-only: --reps)
    names = [*systems, *(["gguf-int"] if a.integer_prompt else [])]
    ttft = {s: [] for s in names}
    for rep in range(a.reps if a.ttft_only else 3):
        for s in names[rep % len(names):] + names[:rep % len(names)]:   # order rotated, as the decode runs
            dense = ggml.DENSE_KINDS
            if s == "gguf-int":                                 # every prompt chunk on the integer kernel
                ggml.DENSE_KINDS = ()
            t0 = time.perf_counter()
            try:
                if s == "llama.cpp":
                    systems[s].reset()
                    next(iter(systems[s].generate(long_ids, temp=0.0, top_k=1, reset=True)))
                else:
                    systems[s.removesuffix("-int")].generate([long_ids], SamplingParams(temperature=0, max_tokens=1))
            finally:
                ggml.DENSE_KINDS = dense
            ttft[s].append(time.perf_counter() - t0)
    print(f"  TTFT, 1000-token prompt (median of {len(ttft['gguf'])}, load average {os.getloadavg()[0]:.2f}): "
          + "  ".join(f"{s} {statistics.median(v) * 1e3:.0f} ms" for s, v in ttft.items()))
    for s in () if a.ttft_only else ("gguf", "w8a8"):
        t = t_of_k(systems[s])
        print(f"  t(k) {s}: " + "  ".join(f"k={k}: {v:.2f} ms ({v / t[1]:.2f})" for k, v in t.items()))


if __name__ == "__main__":
    main()
