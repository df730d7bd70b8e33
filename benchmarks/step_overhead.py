"""The decode step's own Python time: an engine step's wall time less its forward's, per decode step,
on a real model, plain and with a drafter, at one and several rows of the batch.

    python benchmarks/step_overhead.py [--model default] [--plugins none,memory_decoding,lookahead]
                                       [--batch 1,8] [--tokens 96] [--repeats 5]

Each setting decodes the same greedy requests --repeats times in one engine (the first run warms the
drafter's memory and is not counted); every Engine.step that ran a forward over the running batch
(ModelRunner.verify) is a decode step, and what it spent outside that forward (drafting, building
the queries, accepting, emitting, the bookkeeping) is its overhead. Reported: the median and p90
microseconds of overhead per decode step and per sequence in it, and the forward's median, so the
overhead's share of a step is plain. Compare two checkouts by running this script from each (the
overhead is the step loop's, so the same machine, model and settings give comparable figures).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from paraspec import LLM, SamplingParams

PROMPTS = [
    "Rewrite this function with type hints and a docstring:\n\ndef mean(xs):\n    total = 0\n"
    "    for x in xs:\n        total += x\n    return total / len(xs)\n",
    "List five ways to make a Python loop faster, one line each.",
    "Explain what a KV cache is in two sentences.",
    "Translate to French: The weather is nice today, and we are going to the beach.",
    "Write a SQL query that counts orders per customer in a table orders(id, customer_id).",
    "Summarise the rules of chess in three short bullet points.",
    "Give a JSON object with the fields name, age and city for a made-up person.",
    "Continue the sequence: 2, 4, 8, 16, 32,",
]


def measure(llm: LLM, prompts: list[str], tokens: int, repeats: int) -> dict:
    engine, runner = llm.engine, llm.engine.runner
    forward = runner.verify
    spent: list[float] = []

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return forward(*a, **k)
        finally:
            spent.append(time.perf_counter() - t0)

    runner.verify = timed
    step = engine.step
    overhead, forwards, rows = [], [], []

    def timed_step():
        before, running = len(spent), len(engine.running)
        t0 = time.perf_counter()
        out = step()
        total = time.perf_counter() - t0
        if len(spent) > before:  # a decode step (prefill chunks run no verify)
            overhead.append(total - spent[-1])
            forwards.append(spent[-1])
            rows.append(max(running, 1))
        return out

    engine.step = timed_step
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    try:
        for r in range(repeats + 1):
            if r == 1:  # the first run warms the memory: not counted
                overhead.clear(), forwards.clear(), rows.clear()
            llm.generate(prompts, params)
    finally:
        runner.verify, engine.step = forward, step
    per_seq = [o / n for o, n in zip(overhead, rows)]
    q = lambda xs, p: statistics.quantiles(xs, n=10)[p - 1] if len(xs) > 1 else xs[0]  # noqa: E731
    return {
        "steps": len(overhead),
        "overhead_us_p50": 1e6 * statistics.median(overhead),
        "overhead_us_p90": 1e6 * q(overhead, 9),
        "per_seq_us_p50": 1e6 * statistics.median(per_seq),
        "forward_ms_p50": 1e3 * statistics.median(forwards),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--plugins", default="none,memory_decoding,lookahead")
    p.add_argument("--batch", default="1,8")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the rows here")
    a = p.parse_args()
    results = []
    print(
        f"{platform.processor() or platform.machine()}; model {a.model}; {a.tokens} tokens x {a.repeats} runs"
    )
    print(
        f"{'plugin':<16}{'batch':>6}{'steps':>7}{'overhead p50 us':>17}{'p90 us':>9}{'per seq us':>12}"
        f"{'forward ms':>12}"
    )
    for plugin in a.plugins.split(","):
        params = None if plugin == "none" else {"plugin_type": plugin}
        llm = LLM(
            a.model,
            plugin_params=params,
            num_threads=a.threads,
            max_batch_size=max(map(int, a.batch.split(","))),
        )
        for b in map(int, a.batch.split(",")):
            prompts = (PROMPTS * (b // len(PROMPTS) + 1))[:b]
            row = {"plugin": plugin, "batch": b, **measure(llm, prompts, a.tokens, a.repeats)}
            results.append(row)
            print(
                f"{plugin:<16}{b:>6}{row['steps']:>7}{row['overhead_us_p50']:>17.0f}{row['overhead_us_p90']:>9.0f}"
                f"{row['per_seq_us_p50']:>12.0f}{row['forward_ms_p50']:>12.2f}"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
