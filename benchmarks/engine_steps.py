"""What a decode step's forward costs inside a real engine run, by its row count, against the
curve the engine measured at start-up (ModelRunner.forward_cost) and drafters size drafts by:

    python benchmarks/engine_steps.py [--tasks grounded,humaneval] [--n 5] [--plugin '{"plugin_type": "hybrid"}']

Each task runs twice on one LLM, plain decoding (AR) and with the drafter, back to back in
alternating order, greedy. Every runner.verify call is timed (the forward, for all rows a step asks logits for).
Per row count: steps, median ms, that over AR's median one-row step (the real t(k)/t(1)) and the
engine's curve at k. Where the two part, drafts are priced wrong. Also each run's decode time,
and the time outside the forward (drafting, acceptance, bookkeeping). Quote ratios: the machine's
speed drifts.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

from paraspec import LLM, SamplingParams
from paraspec.bench.tasks import load_task_set


def generate(llm: LLM, task, plugin: dict | None) -> dict:
    ids = task.prompt_ids(llm.tokenizer)
    params = SamplingParams(temperature=0, max_tokens=task.max_new_tokens, stop=list(task.stop))
    return llm.generate([ids], params, plugin_params=plugin)[0].stats


def totals(stats: list[dict], log: list[tuple[int, float]]) -> dict:
    decode_s = sum(s["decode_s"] for s in stats)
    forward_s = sum(dt for _, dt in log)                       # decode steps only (prefill: runner.prefill)
    return {"decode_s": round(decode_s, 3), "tokens": sum(s["generated_tokens"] for s in stats),
            "steps": sum(s["decode_steps"] for s in stats), "draft_s": round(sum(s["draft_s"] for s in stats), 3),
            "outside_forward_s": round(decode_s - forward_s, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--tasks", default="grounded,humaneval")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--plugin", default='{"plugin_type": "hybrid"}')
    args = ap.parse_args()
    plugin = json.loads(args.plugin)
    llm = LLM(args.model)                   # plain decoding by default; the drafter per call
    curve = llm.runner.forward_cost()
    log: list[tuple[int, float]] = []
    verify = llm.runner.verify

    def timed(caches, queries):
        t0 = time.perf_counter()
        out = verify(caches, queries)
        log.append((sum(len(q.tokens) for q in queries), time.perf_counter() - t0))
        return out

    llm.runner.verify = timed
    for name in args.tasks.split(","):
        runs: dict[str, tuple[list[dict], list[tuple[int, float]]]] = {"ar": ([], []), "drafted": ([], [])}
        for i, task in enumerate(load_task_set(name, args.n, 0)):
            # each task both ways, back to back, the order alternating: drift hits both alike
            for kind in ("ar", "drafted") if i % 2 == 0 else ("drafted", "ar"):
                log.clear()
                runs[kind][0].append(generate(llm, task, None if kind == "ar" else plugin))
                runs[kind][1].extend(log)
        ar, spec = totals(*runs["ar"]), totals(*runs["drafted"])
        one_row = statistics.median(dt for k, dt in runs["ar"][1] if k == 1)
        by_rows: dict[int, list[float]] = defaultdict(list)
        for k, dt in runs["drafted"][1]:
            by_rows[k].append(dt)
        print(f"\n{name}: AR {json.dumps(ar)}\n{' ' * len(name)}  drafted {json.dumps(spec)}"
              f"  speedup {ar['decode_s'] / spec['decode_s']:.3f}")
        print(f"{'rows':>5} {'steps':>6} {'ms':>7} {'real t(k)':>10} {'curve t(k)':>11}"
              f"   (AR's one-row step: {1000 * one_row:.2f} ms)")
        for k in sorted(by_rows):
            v = by_rows[k]
            if len(v) >= 3:
                med = statistics.median(v)
                print(f"{k:>5} {len(v):>6} {1000 * med:>7.2f} {med / one_row:>10.2f} {curve.get(k, float('nan')):>11.2f}")


if __name__ == "__main__":
    main()
