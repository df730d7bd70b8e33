"""The verify step's cost on the default model: t(k) of one forward over k new tokens (k = 1, 4,
8, 16) on a 500-token cache, logits for all k rows, and AR decode tokens/s, one process:

    python benchmarks/verify_cost.py [--model default] [--reps 15] [--threads 2] [--ar-tokens 96] [--cpu-time]

Prints JSON (medians, ms and tok/s) so that two checkouts can be compared by running this
script alternately from each (a noisy neighbour then hits both alike): quote ratios. --cpu-time
times with the process's CPU time instead of the wall clock: on a machine shared by more busy
processes than cores, with --threads 1, it leaves out the time other processes hold the core.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from paraspec import LLM, SamplingParams
from paraspec.model.transformer import SeqInput

KS = (1, 4, 8, 16)
CACHED = 500


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ar-tokens", type=int, default=96)
    p.add_argument("--cpu-time", action="store_true")
    a = p.parse_args()
    clock = time.process_time if a.cpu_time else time.perf_counter
    torch.set_num_threads(a.threads)
    llm = LLM(a.model)
    model = llm.model
    tokens = torch.randint(100, 1000, (CACHED + max(KS),), generator=torch.Generator().manual_seed(0))
    cache = model.new_cache(CACHED + 2 * max(KS))
    model.forward(tokens[:CACHED], torch.arange(CACHED), [SeqInput(cache, CACHED)], prompt=True)
    cache.length = CACHED

    def forward_ms(k: int) -> float:   # the new rows are written past the cache's length, never committed
        t = clock()
        model.forward(tokens[CACHED:CACHED + k], torch.arange(CACHED, CACHED + k), [SeqInput(cache, k)],
                      logits_rows=torch.arange(k))
        return (clock() - t) * 1e3

    times: dict[int, list[float]] = {k: [] for k in KS}
    for k in KS:
        forward_ms(k)
    for _ in range(a.reps):
        for k in KS:
            times[k].append(forward_ms(k))
    fwd = {k: statistics.median(v) for k, v in times.items()}
    params = SamplingParams(temperature=0, max_tokens=a.ar_tokens, ignore_eos=True)
    prompt = "Explain how a hash table works, with a short Python example."
    llm.generate(prompt, params)
    rates = []
    for _ in range(3):
        t = clock()
        out = llm.generate(prompt, params)[0]
        rates.append(len(out.token_ids) / (clock() - t))
    print(json.dumps({"kernels": model.kernels.label, "threads": a.threads, "clock": clock.__name__,
                      "forward_ms": {k: round(v, 2) for k, v in fwd.items()},
                      "t_k_over_t_1": {k: round(v / fwd[1], 2) for k, v in fwd.items()},
                      "ar_tok_s": round(statistics.median(rates), 1)}))


if __name__ == "__main__":
    main()
