"""A cold drafter against plain decoding on chosen MT-Bench first turns, repeated: what a request
with nothing to copy costs its drafter.

    python benchmarks/cold_turns.py --model qwen2.5-coder-1.5b --tasks writing/81,writing/88 [--plugin hybrid]
                                    [--repeats 4] [--max-tokens 160]

The bench runs each task once per system, and a single short task moves by +-10 % from run to run
on a shared VM; this runs each task --repeats times, plain decoding and the drafter alternating
(the order swapped every repeat), every drafter run from the same cold state (a deep copy of one
private drafter: an empty memory, as the bench's cold systems start). Per task: the drafter's
decode tokens/s over plain decoding's, per repeat and their median, and the drafter's last run:
tokens, decode steps, draft tokens sent and accepted, the steps without a draft by reason, and its
propose seconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics

from paraspec import LLM, SamplingParams
from paraspec.bench.workload_tasks import mtbench
from paraspec.config import parse_plugin_params
from paraspec.sequence import sequence_stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--tasks", default="writing/81,roleplay/91,stem/141,humanities/151")
    ap.add_argument("--plugin", default="hybrid", help="plugin_type, or a plugin_params JSON")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=160)
    a = ap.parse_args()
    plugin = a.plugin if a.plugin.startswith("{") else json.dumps({"plugin_type": a.plugin})
    llm = LLM(a.model)
    engine = llm.engine
    cold = engine.drafters.private(parse_plugin_params(plugin, llm.config.speculation_gamma))
    shared = (engine, llm.runner, llm.model, llm.tokenizer)
    params = SamplingParams(temperature=0, max_tokens=a.max_tokens)
    tasks = {t.task_id: t for t in mtbench()}

    def run(ids: list[int], drafted: bool) -> dict:
        # a fresh memo each copy: deepcopy fills the one it is given, and a second copy from a
        # filled memo would share the first copy's memory
        drafter = copy.deepcopy(cold, {id(o): o for o in shared}) if drafted else None
        (seq,) = engine.add_request(ids, params, drafter=drafter)
        engine.run_until_done(lambda update: None)
        return sequence_stats(seq)

    run(llm.tokenizer.encode_chat([{"role": "user", "content": "Hello."}]), True)  # warm-up
    for task_id in a.tasks.split(","):
        ids = llm.tokenizer.encode_chat(tasks[task_id].messages)
        rates: dict[bool, list[float]] = {False: [], True: []}
        for rep in range(a.repeats):
            for drafted in (False, True) if rep % 2 == 0 else (True, False):
                s = run(ids, drafted)
                rates[drafted].append(s["tokens_per_s"])
                if drafted:
                    last = s
        ratios = [d / p for d, p in zip(rates[True], rates[False])]
        print(
            f"{task_id}: {a.plugin} / AR {statistics.median(ratios):.3f} (each "
            f"{', '.join(f'{r:.3f}' for r in ratios)}), AR {statistics.median(rates[False]):.1f} "
            f"tok/s; last run: {last['generated_tokens']} tokens in {last['decode_steps']} steps, "
            f"draft tokens {last['draft_tokens']} sent / {last['accepted_draft_tokens']} accepted, "
            f"no draft {last['no_draft_steps']}, propose {last['draft_s']:.3f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
