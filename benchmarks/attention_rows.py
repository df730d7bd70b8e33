"""The csrc decode/verify attention alone, as the bundled model calls it per forward: 30 layers
of 9 query / 3 kv heads x 64 over 500 committed keys plus k causal new rows, k = 1 .. 16.

    python benchmarks/attention_rows.py [--isa avx512] [--reps 15] [--keys 500] [--hot] [--against DIR]

One thread, the thread's CPU time (other processes on a shared machine do not stretch it);
medians of --reps rounds of the 30 calls. Each layer has its own K/V (23 MB for 30 layers at 500
keys, as the forward streams them); --keys: the committed keys (prompts in the benches reach
~1,100); --hot reuses one layer's, which stays in cache. --against DIR: also time the same
module built elsewhere (an old checkout's _kernels_<isa>*.so in DIR), the two interleaved in
one process, so that drift hits both alike, and say whether their outputs agree.
"""
from __future__ import annotations

import argparse
import glob
import importlib
import importlib.util
import os
import statistics
import time

import torch

LAYERS, HEADS, KV, HD, CACHED = 30, 9, 3, 64, 500
KS = (1, 2, 4, 8, 16)


def load(isa: str, where: str | None):
    """The built module of `isa`, from the package or from the folder `where`."""
    if where is None:
        return importlib.import_module(f"paraspec.model._kernels_{isa}")
    path = glob.glob(os.path.join(where, f"_kernels_{isa}*.so"))[0]
    # another package name: under the same full name the extension loader returns the first module
    spec = importlib.util.spec_from_file_location(f"against._kernels_{isa}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--isa", default="avx512")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--keys", type=int, default=CACHED, help="committed keys")
    p.add_argument("--hot", action="store_true", help="one layer's K/V for all 30 calls")
    p.add_argument("--against", default=None, help="a folder holding another build of the module")
    a = p.parse_args()
    torch.set_num_threads(1)
    mods = {"this": load(a.isa, None)}
    if a.against:
        mods["against"] = load(a.isa, a.against)
    g = torch.Generator().manual_seed(0)
    cap = a.keys + max(KS)
    n_kv = 1 if a.hot else LAYERS
    ks = [torch.randn(KV, cap, HD, generator=g) for _ in range(n_kv)]
    vs = [torch.randn(KV, cap, HD, generator=g) for _ in range(n_kv)]
    qs = {k: torch.randn(k, HEADS, HD, generator=g) for k in KS}
    empty = torch.empty(0, dtype=torch.bool)
    times = {(m, k): [] for m in mods for k in KS}
    for rep in range(a.reps + 1):
        for m, mod in mods.items():
            for k in KS:
                t = time.thread_time()
                for layer in range(LAYERS):
                    kv = layer % n_kv
                    mod.attention(qs[k], ks[kv], vs[kv], a.keys, empty, HD ** -0.5)
                if rep:   # the first round warms up
                    times[(m, k)].append(time.thread_time() - t)
    print(f"{a.isa}, {LAYERS} layers x {HEADS}/{KV} heads x {HD}, {a.keys} keys, {'hot' if a.hot else 'streamed'}"
          f" K/V, 1 thread, CPU ms (median of {a.reps})")
    print(f"{'':>8} " + " ".join(f"{f'k={k}':>8}" for k in KS))
    for m in mods:
        print(f"{m:>8} " + " ".join(f"{statistics.median(times[(m, k)]) * 1e3:8.2f}" for k in KS))
    if a.against:
        outs = [[mod.attention(qs[k], ks[0], vs[0], a.keys, empty, HD ** -0.5) for k in KS] for mod in mods.values()]
        diff = max(float((x - y).abs().max()) for x, y in zip(*outs))
        print(f"largest output difference between the two builds: {diff:.3g}")


if __name__ == "__main__":
    main()
