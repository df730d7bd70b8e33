"""The verify step's cost on GGUF blocks: t(k)/t(1) of one forward over k new tokens (k = 1, 4,
8, 16) on a ~500-token cache, per kernel path this CPU runs (avx512:vnni512, avx2:avxvnni,
avx2:avx2), quantization "gguf":

    python benchmarks/gguf_verify_cost.py [--model PATH|default|q4_k_m] [--reps 9] [--threads 2] [--all-rows]
                                          [--paths avx512:vnni512,avx2:avx2]

--all-rows: logits for every one of the k rows (as a verify step asks), not only the last row's.
On one thread (--threads 1) the clock is the thread's CPU time, which other processes on a shared
machine do not stretch (they still share its caches).

--model q4_k_m (or q6_k, q4_k_s...): the bundled model requantised by llama.cpp (gguf_requant.py;
needs llama-cpp-python once, then cached in ~/.cache/paraspec). Paths are measured round-robin, rep by
rep (a noisy neighbour hits each alike); each cell is a median. The avx2 paths run here on the
same CPU (their kernels only; torch's own ops keep this CPU's ISA): quote ratios, not absolutes.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from paraspec import LLM
from paraspec.model import kernels
from paraspec.model.gguf_requant import bench_model
from paraspec.model.transformer import SeqInput

KS = (1, 4, 8, 16)


def one_forward(model, cache, prompt: torch.Tensor, k: int, all_rows: bool, clock=time.perf_counter) -> float:
    rows = torch.arange(k) if all_rows else torch.tensor([k - 1])
    t = clock()
    model.forward(prompt[:k], torch.arange(500, 500 + k), [SeqInput(cache, k)], logits_rows=rows)
    return clock() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="q4_k_m")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--all-rows", action="store_true", help="logits for all k rows (a verify step's)")
    p.add_argument("--paths", default="", help="comma-separated kernel labels, in load order (default: every one this CPU runs)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    feats = kernels.cpu_features()
    print("cpu flags:", " ".join(f for f in kernels.SHOWN if f in feats))
    path = bench_model(a.model)
    labels = a.paths.split(",") if a.paths else [k.label for k in kernels.runnable() if k.module is not None]
    # loaded (and measured) in this order; the model loaded first measured 5-10 % slower here at
    # every k, whatever its path: to compare two paths, run both orders
    paths = {label: LLM(path, quantization="gguf", kernels=label).model for label in labels}
    prompt = torch.randint(100, 1000, (500,))
    caches = {}
    for label, model in paths.items():
        caches[label] = model.new_cache(1024)
        model.forward(prompt, torch.arange(500), [SeqInput(caches[label], 500)], prompt=True)
        caches[label].length = 500
    times = {label: {k: [] for k in KS} for label in paths}
    clock = time.thread_time if a.threads == 1 else time.perf_counter  # one thread: CPU time (module doc)
    for _ in range(a.reps):
        for label, model in paths.items():
            for k in KS:
                times[label][k].append(one_forward(model, caches[label], prompt, k, a.all_rows, clock))
    kinds = sorted({lin.kind for lin in vars(next(iter(paths.values())).layers[0]).values() if hasattr(lin, "kind")})
    rows = "all k rows" if a.all_rows else "the last row"
    print(f"model {path}: layer-0 blocks {', '.join(kinds)}; {a.threads} threads; logits of {rows}; median of {a.reps}"
          f" ({'CPU' if a.threads == 1 else 'wall'} time)")
    for label, t in times.items():
        med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
        print(f"  {label:15s} " + "  ".join(f"k={k}: {v:6.2f} ms ({v / med[1]:.2f})" for k, v in med.items()))


if __name__ == "__main__":
    main()
