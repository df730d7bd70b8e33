"""Requests asked again, against plain decoding and the cost curve's own ceiling.

    python benchmarks/warm_repeats.py [--model qwen2.5-coder-1.5b] [--plugin hybrid] [--n 8]
                                      [--repeats 3] [--threads 2] [--without-replay] [--out FILE.json]

The bench's `repeated` set (the type-hint edit over functions of one stdlib module): each of its
--n distinct requests is asked once through the drafter (its answer reaches the drafting memory),
then each is asked again --repeats times, plain decoding and the drafter alternating (the order
swapped every repeat), all greedy in one engine; every repeat's tokens are checked against plain
decoding's. --without-replay adds a third system to each round: the drafter with the memory's
answers hidden (its past outputs and trie as they are, so it finds the answer by suffix matches
alone, as the hybrid did before it replayed answers by prompt).

Per request: the drafter's decode tokens/s over plain decoding's (the median of the repeats), its
steps, and that speed as a share of two ceilings of the forward's cost curve:
- the curve's, max over k <= 64 of k / t(k): k rows verified, all accepted, k tokens for the time
  of k rows (64 rows, decoding_length 16 + the largest copy_length, is the most a copy can be
  verified in);
- this answer's, within the drafter's own row budget: its tokens after the first in steps of at
  most that many rows, the last step shorter.
t(k)/t(1) is measured after the runs in the same process: the model's forward over k new rows
after a cache as long as the repeats' median context halfway through their answers, logits for
every row (verify_rows.py's), --curve-reps rounds in a rotating order, medians, linear between the
sizes measured. The engine's start-up probe, which steers the policy, is printed beside it. And,
free of the clock: the drafter's decode steps against the fewest its row budget allows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from paraspec import LLM, SamplingParams
from paraspec.bench.tasks import load_task_set
from paraspec.sequence import sequence_stats
import verify_rows  # this folder's
from verify_rows import cpu_facts, ours, timed_round

CURVE_ROWS = 64  # the most rows any configuration verifies a copy in
CURVE_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64)


def measured_curve(model, context: int, reps: int) -> dict[int, float]:
    """t(k)/t(1) of the forward over k rows after a `context`-token cache, for every k <=
    CURVE_ROWS (linear between CURVE_SIZES), from the medians of `reps` rotated rounds."""
    verify_rows.CONTEXT = context
    cands = ours(model, list(CURVE_SIZES), time.perf_counter, {})
    forwards = {name: c for name, c in cands.items() if name.startswith("forward")}
    names = list(forwards)
    timed_round(forwards, names, {n: [] for n in names}, time.perf_counter)  # warm-up
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        shift = rep * 5 % len(names)
        timed_round(forwards, names[shift:] + names[:shift], times, time.perf_counter)
    at = {int(n.split()[1]): statistics.median(v) for n, v in times.items()}
    ks = sorted(at)
    curve = {}
    for k in range(1, CURVE_ROWS + 1):
        lo, hi = max(x for x in ks if x <= k), min(x for x in ks if x >= k)
        t = at[lo] if hi == lo else at[lo] + (at[hi] - at[lo]) * (k - lo) / (hi - lo)
        curve[k] = t / at[1]
    return curve


def ceilings(cost, tokens: int, max_rows: int) -> tuple[float, int, float]:
    """The curve's ceiling max_k k / t(k) (k <= CURVE_ROWS) and its k; and for an answer of
    `tokens` decode tokens, the best tokens per unit of time a k <= max_rows allows (steps of k
    rows, the last one shorter)."""
    best_k = max(range(1, CURVE_ROWS + 1), key=lambda k: k / cost(k))
    answer = 0.0
    for k in range(1, max_rows + 1):
        full, rest = divmod(tokens, k)
        answer = max(answer, tokens / (full * cost(k) + (cost(rest) if rest else 0.0)))
    return best_k / cost(best_k), best_k, answer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--plugin", default="hybrid", help="plugin_type, or a plugin_params JSON")
    ap.add_argument("--n", type=int, default=8, help="distinct requests")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--without-replay", action="store_true", help="also the drafter, no replays")
    ap.add_argument("--curve-reps", type=int, default=7, help="rounds of the t(k) measurement")
    ap.add_argument("--out", default=None, help="a JSON file for every figure")
    a = ap.parse_args()
    plugin = json.loads(a.plugin) if a.plugin.startswith("{") else {"plugin_type": a.plugin}
    llm = LLM(a.model, plugin_params=plugin, num_threads=a.threads)
    engine, tok = llm.engine, llm.tokenizer
    memory = getattr(engine.default_drafter, "output_memory", None)
    if a.without_replay and memory is None:
        raise SystemExit(f"--without-replay: {a.plugin} keeps no output memory to replay from")
    p = engine.default_drafter.params
    p = getattr(p, "memory", p)  # the hybrid's memory_decoding part sizes its copies
    max_rows = p.max_draft + p.copy_length + 1  # the most rows a copy is verified in
    systems = ["plain", "drafter"] + (["no-replay"] if a.without_replay else [])

    def run(task, system: str) -> tuple[list[int], dict]:
        params = SamplingParams(temperature=0, max_tokens=task.max_new_tokens)
        ids = tok.encode_chat(task.messages)
        hide = system == "no-replay"
        if hide:  # its answers hidden for this run, and what this run adds forgotten
            answers, generation = memory.answers, memory.generation
            memory.answers = {}
        (seq,) = engine.add_request(ids, params, drafter=None if system == "plain" else "default")
        engine.run_until_done(lambda update: None)
        if hide:
            if memory.generation != generation:
                raise SystemExit("the output memory filled up mid-run: use fewer requests")
            memory.answers = answers
        return list(seq.output), sequence_stats(seq)

    first = [t for t in load_task_set("repeated", 2 * a.n, 0) if t.task_id.endswith("#1")]
    for task in first:  # the first asks: their answers reach the memory
        run(task, "drafter")
    rows = []
    for task in first:
        rates: dict[str, list[float]] = {name: [] for name in systems}
        outs: dict[str, list[int]] = {}
        last: dict[str, dict] = {}
        for rep in range(a.repeats):
            for name in systems if rep % 2 == 0 else systems[::-1]:
                outs[name], last[name] = run(task, name)
                rates[name].append(last[name]["tokens_per_s"])

        def over_plain(name: str) -> list[float]:
            return [d / p for d, p in zip(rates[name], rates["plain"])]

        row = {
            "task": task.task_id.removesuffix("#1"),
            "prompt_tokens": last["drafter"]["prompt_tokens"],
            "tokens": len(outs["drafter"]),
            "equal_to_plain": all(out == outs["plain"] for out in outs.values()),
            "speedup": round(statistics.median(over_plain("drafter")), 3),
            "each": [round(r, 3) for r in over_plain("drafter")],
            "decode_steps": last["drafter"]["decode_steps"],
            # the tokens after the prefill's in steps of max_rows tokens (max_rows - 1 drafts
            # accepted and the bonus)
            "fewest_steps": -(-(len(outs["drafter"]) - 1) // max_rows),
        }
        if a.without_replay:
            row["no_replay_speedup"] = round(statistics.median(over_plain("no-replay")), 3)
            row["no_replay_decode_steps"] = last["no-replay"]["decode_steps"]
        rows.append(row)
        print(row, flush=True)

    context = int(statistics.median(r["prompt_tokens"] + r["tokens"] // 2 for r in rows))
    measured = measured_curve(llm.model, context, a.curve_reps)
    cost = measured.__getitem__
    for row in rows:
        curve, k, answer = ceilings(cost, max(row["tokens"] - 1, 1), max_rows)
        row |= {
            "curve_ceiling": round(curve, 3),
            "curve_ceiling_rows": k,
            "answer_ceiling": round(answer, 3),
            "of_curve_ceiling": round(row["speedup"] / curve, 3),
            "of_answer_ceiling": round(row["speedup"] / answer, 3),
        }
        print(
            f"{row['task']}: {row['speedup']:.2f}x plain ({', '.join(f'{r:.2f}' for r in row['each'])}), "
            f"{row['tokens']} tokens in {row['decode_steps']} steps (fewest {row['fewest_steps']}); "
            f"ceiling {curve:.2f}x (k={k}), "
            f"{answer:.2f}x for this length in <= {max_rows} rows: {row['of_curve_ceiling']:.0%} / "
            f"{row['of_answer_ceiling']:.0%}; equal to plain: {row['equal_to_plain']}"
            + (
                f"; without replay {row['no_replay_speedup']:.2f}x in "
                f"{row['no_replay_decode_steps']} steps"
                if a.without_replay
                else ""
            )
        )
    keys = ["speedup", "of_curve_ceiling", "of_answer_ceiling"]
    keys += ["no_replay_speedup"] if a.without_replay else []
    med = {key: statistics.median(r[key] for r in rows) for key in keys}
    steps = sum(r["decode_steps"] for r in rows), sum(r["fewest_steps"] for r in rows)
    print(
        f"decode steps {steps[0]}, the fewest the row budget allows {steps[1]}"
        + (
            f", without replay {sum(r['no_replay_decode_steps'] for r in rows)}"
            if a.without_replay
            else ""
        )
    )
    print(
        f"median over {len(rows)}: {med['speedup']:.2f}x plain, {med['of_curve_ceiling']:.0%} of "
        f"the curve's ceiling, {med['of_answer_ceiling']:.0%} of the answers' own"
        + (f"; without replay {med['no_replay_speedup']:.2f}x" if a.without_replay else "")
    )
    print(f"t(k)/t(1) measured after a {context}-token cache")
    for name, c in (("measured", cost), ("engine's probe", engine.cost)):
        print(
            f"t(k)/t(1), {name}: " + " ".join(f"{k}:{c(k):.2f}" for k in (2, 4, 8, 16, 32, 48, 64))
        )
    print(f"cpu: {cpu_facts()[0]}; kernels {llm.model.kernels.label}; threads {a.threads}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(
                {
                    "model": a.model,
                    "plugin": plugin,
                    "cpu": cpu_facts()[0],
                    "kernels": llm.model.kernels.label,
                    "threads": a.threads,
                    "curve_context": context,
                    "cost_curve": {k: round(cost(k), 3) for k in range(1, CURVE_ROWS + 1)},
                    "engine_cost_curve": {k: round(engine.cost(k), 3) for k in range(1, 65)},
                    "drafter_rows": max_rows,
                    "median": med,
                    "requests": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
