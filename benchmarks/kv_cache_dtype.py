"""An fp16 KV cache against the fp32 one, side by side in one process (kv_cache_dtype):

    python benchmarks/kv_cache_dtype.py [--contexts 256,1024,2048] [--rows 1,8] [--tasks grounded,humaneval] [--n 6]

1. The forward alone: one model, an fp32 and an fp16 cache holding the same context, forwards of
   k new rows (1: a decode step; 8: a verify step) timed in a new shuffled order each round (wall
   clock, the process's threads), median ms per (context, k, dtype) and fp16 / fp32.
2. Decoding: two engines on the bundled model (fp32 and fp16 caches), each bench task decoded
   greedily by both with plain decoding (AR) and the hybrid drafter, the four runs in a rotating
   order; per set, the median tok/s ratio fp16 / fp32 for AR and for hybrid, whether each engine's
   hybrid output equals its AR output (lossless), and how many outputs the two caches share.
Quote ratios: the machine's speed drifts between runs.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from paraspec import LLM, SamplingParams
from paraspec.bench.tasks import load_task_set
from paraspec.model.kv_cache import KVCache
from paraspec.model.transformer import SeqInput

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def forward_times(llm: LLM, contexts: list[int], rows: list[int], rounds: int) -> None:
    model = llm.model
    print(f"forward ms (median of {rounds}; {torch.get_num_threads()} threads), kernels {llm.kernels.label}")
    for ctx in contexts:
        caches = {}
        for name, dtype in DTYPES.items():
            cache = KVCache(model.args, ctx + max(rows) + 1, dtype)
            llm.runner.prefill(cache, [(7 * i) % 1000 + 100 for i in range(ctx)])
            caches[name] = cache
        times: dict[tuple[int, str], list[float]] = {(k, n): [] for k in rows for n in DTYPES}
        order = list(times)
        for _ in range(rounds):
            random.shuffle(order)
            for k, name in order:
                t0 = time.perf_counter()
                model.forward(torch.zeros(k, dtype=torch.long), torch.arange(ctx, ctx + k),
                              [SeqInput(caches[name], k)], torch.arange(k))
                times[(k, name)].append(time.perf_counter() - t0)
        for k in rows:
            a, b = (1e3 * statistics.median(times[(k, n)]) for n in DTYPES)
            print(f"  context {ctx:5d}  rows {k:2d}: fp32 {a:6.2f}  fp16 {b:6.2f}  fp16/fp32 {b / a:.3f}")


def decoding(task_sets: list[str], n: int) -> None:
    llms = {name: LLM(kv_cache_dtype=name) for name in DTYPES}
    hybrid = {"plugin_type": "hybrid"}
    print(f"decoding, greedy, tok/s ratio fp16 / fp32 (median over tasks), kernels {llms['fp32'].kernels.label}")
    for set_name in task_sets:
        ratios = {"ar": [], "hybrid": []}
        lossless, same = True, 0
        tasks = load_task_set(set_name, n)
        for i, task in enumerate(tasks):
            runs = [(name, plugin) for name in DTYPES for plugin in (None, hybrid)]
            runs = runs[i % 4:] + runs[:i % 4]
            out = {}
            for name, plugin in runs:
                llm = llms[name]
                ids = task.prompt_ids(llm.tokenizer)
                params = SamplingParams(temperature=0, max_tokens=task.max_new_tokens, stop=list(task.stop))
                o = llm.generate([ids], params, plugin_params=plugin)[0]
                out[(name, plugin is not None)] = (o.token_ids, len(o.token_ids) / o.stats["decode_s"])
            for mode, drafted in (("ar", False), ("hybrid", True)):
                ratios[mode].append(out[("fp16", drafted)][1] / out[("fp32", drafted)][1])
            lossless &= all(out[(name, True)][0] == out[(name, False)][0] for name in DTYPES)
            same += out[("fp16", False)][0] == out[("fp32", False)][0]
        prompt = statistics.median(len(t.prompt_ids(llms["fp32"].tokenizer)) for t in tasks)
        print(f"  {set_name:10s} ({len(tasks)} tasks, median prompt {prompt:.0f} tokens): "
              f"AR {statistics.median(ratios['ar']):.3f}  hybrid {statistics.median(ratios['hybrid']):.3f}  "
              f"hybrid == AR per cache dtype: {'yes' if lossless else 'NO'}  "
              f"same output fp16 / fp32: {same}/{len(tasks)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="256,1024,2048")
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tasks", default="grounded,humaneval")
    ap.add_argument("--n", type=int, default=6)
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    forward_times(LLM(), ints(a.contexts), ints(a.rows), a.rounds)
    if a.n:
        decoding([s for s in a.tasks.split(",") if s], a.n)


if __name__ == "__main__":
    main()
