"""The GGUF linears alone: ms of one call over k rows (k = 1, 4, 8, 16) for one layer's linears and the
LM head, per kernel path, and t(k)/t(1) of their sum (one layer's linears x layers + the head):

    python benchmarks/gguf_linear_cost.py [--model default|PATH|q4_k_m] [--reps 21] [--threads 2] [--paths LABELS]

A finer probe than gguf_verify_cost.py (no attention, norms or Python around the calls). Paths and
k are measured round-robin, rep by rep; each cell is a median. On one thread (--threads 1) the clock is
the thread's CPU time, which a shared machine's other processes do not stretch (they still share
its caches); quote ratios.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from paraspec import LLM
from paraspec.model import kernels
from paraspec.model.gguf_requant import bench_model

KS = (1, 4, 8, 16)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--reps", type=int, default=21)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--paths", default="", help="comma-separated kernel labels (default: every one this CPU runs)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    path = bench_model(a.model)
    models = {k.label: LLM(path, quantization="gguf", kernels=k.label).model
              for k in kernels.runnable() if k.module is not None and (not a.paths or k.label in a.paths.split(","))}
    clock = time.thread_time if a.threads == 1 else time.perf_counter
    layers = len(next(iter(models.values())).layers)
    linears = {label: {**{n: lin for n, lin in vars(m.layers[0]).items() if hasattr(lin, "kind")},
                       "lm_head": m.lm_head} for label, m in models.items()}
    times = {label: {(n, k): [] for n in lins for k in KS} for label, lins in linears.items()}
    xs = {(lin.in_features, k): torch.randn(k, lin.in_features)
          for lins in linears.values() for lin in lins.values() for k in KS}
    for _ in range(a.reps):
        for label, lins in linears.items():
            for k in KS:
                for n, lin in lins.items():
                    x = xs[(lin.in_features, k)]
                    t = clock()
                    lin(x)
                    times[label][(n, k)].append(clock() - t)
    print(f"model {path}: {layers} layers; {a.threads} threads; median of {a.reps}; ms per call "
          f"({'CPU' if a.threads == 1 else 'wall'} time)")
    for label, lins in linears.items():
        med = {key: statistics.median(v) * 1e3 for key, v in times[label].items()}
        total = {k: sum(med[(n, k)] * (1 if n == "lm_head" else layers) for n in lins) for k in KS}
        print(f"  {label}: all linears " + "  ".join(f"k={k}: {total[k]:6.2f} ({total[k] / total[1]:.2f})" for k in KS))
        for n, lin in lins.items():
            print(f"    {n:10s} {lin.kind:5s} {lin.in_features:5d}->{lin.out_features:5d} "
                  + "  ".join(f"{med[(n, k)]:7.3f} ({med[(n, k)] / med[(n, 1)]:.2f})" for k in KS))


if __name__ == "__main__":
    main()
