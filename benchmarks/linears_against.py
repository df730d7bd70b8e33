"""The GGUF linears inside a verify forward, this build against another one, in one process:
ms per forward spent in each linear (wqkv, wo, w_gate_up, w_down, lm_head), their sum and the
whole forward, at k = 1, 4, 8, 16 new rows on a 500-token cache (verify_breakdown.py's setup).

    python benchmarks/linears_against.py OLD_BUILD_DIR [--kernels avx512:amx] [--reps 15]

OLD_BUILD_DIR holds another checkout's _kernels_<isa>*.so (say, main's, copied before a change).
Both builds run their own copy of the model, interleaved forward by forward (in both orders, half
the rounds each), so that drift on a shared machine hits both alike; each cell is the median over
all rounds. One thread, the thread's CPU time. Here the model built first ("this") ran 2-3 % slower
even where both builds run the same code (k = 1, 4): compare the k=16 - k=1 growth, or copy this
build's module to a folder and swap the two. Last line: whether the builds' logits are bit-identical.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from attention_rows import load
from paraspec import LLM
from paraspec.model.kernels import Kernels
from paraspec.model.transformer import SeqInput
from verify_breakdown import CACHED, KS, LINEARS, Timed

NAMES = (*LINEARS, "lm_head")


def build_model(module, isa: str, variant: str, spent: dict):
    """The bundled model on `module`'s kernels, its linears timed into spent, its cache prefilled."""
    model = LLM("default", kernels=f"{isa}:{variant}").model
    kern = Kernels(isa, module, variant)
    model.kernels = kern
    model.decoder = None  # the Python layer loop, whose calls the wrappers time (verify_breakdown.instrument)
    for layer in model.layers:
        for name in LINEARS:
            getattr(layer, name).kernels = kern
            setattr(layer, name, Timed(getattr(layer, name), name, spent, time.thread_time))
    model.lm_head.kernels = kern
    model.lm_head = Timed(model.lm_head, "lm_head", spent, time.thread_time)
    tokens = torch.randint(100, 1000, (CACHED + max(KS),), generator=torch.Generator().manual_seed(0))
    cache = model.new_cache(CACHED + 2 * max(KS))
    model.forward(tokens[:CACHED], torch.arange(CACHED), [SeqInput(cache, CACHED)], prompt=True)
    cache.length = CACHED
    return model, cache, tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("against", help="a folder holding another build of the module")
    p.add_argument("--kernels", default="avx512:amx")
    p.add_argument("--reps", type=int, default=15)
    a = p.parse_args()
    torch.set_num_threads(1)
    isa, _, variant = a.kernels.partition(":")
    spent = {b: defaultdict(float) for b in ("this", "against")}
    runs = {b: build_model(load(isa, None if b == "this" else a.against), isa, variant, spent[b]) for b in spent}
    total, parts, logits = defaultdict(list), defaultdict(list), {}
    for rep in range(2 * a.reps + 1):
        for b in (("this", "against") if rep % 2 else ("against", "this")):
            model, cache, tokens = runs[b]
            for k in KS:   # the new rows are written past the cache's length, never committed
                spent[b].clear()
                t = time.thread_time()
                y = model.forward(tokens[CACHED:CACHED + k], torch.arange(CACHED, CACHED + k), [SeqInput(cache, k)],
                                  logits_rows=torch.arange(k))
                if rep:   # the first round warms up
                    total[(b, k)].append(time.thread_time() - t)
                    for name, s in spent[b].items():
                        parts[(b, k, name)].append(s)
                else:
                    logits[(b, k)] = y
    print(f"{a.kernels}, 1 thread, CPU ms per forward (median of {2 * a.reps}); last column: t(k) / t(1)")
    print(f"{'':>8} {'k':>3} " + " ".join(f"{n:>9}" for n in NAMES) + f" {'linears':>8} {'total':>8} {'ratio':>6}")
    for b in runs:
        one = statistics.median(total[(b, 1)])
        for k in KS:
            med = [statistics.median(parts[(b, k, n)]) * 1e3 for n in NAMES]
            t = statistics.median(total[(b, k)])
            print(f"{b:>8} {k:>3} " + " ".join(f"{m:9.2f}" for m in med) + f" {sum(med):8.2f} {t * 1e3:8.2f} {t / one:6.2f}")
    same = all(torch.equal(logits[("this", k)], logits[("against", k)]) for k in KS)
    print(f"logits bit-identical between the builds: {same}")


if __name__ == "__main__":
    main()
