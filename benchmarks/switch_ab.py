"""One engine switch on and off, side by side: decode tokens/s of each task for plain decoding
(AR), a drafter with the switch off, and the same drafter with it on.

    python benchmarks/switch_ab.py [--switch gate] [--tasks chat,humaneval,grounded] [--n 10]
                                   [--repeats 3] [--plugin '{"plugin_type": "hybrid"}']

Switches: `gate`, the draft gate (decoding/gate.py, Engine.draft_gate). (`cost`, the curve
corrected by the engine's own steps, was measured with it at dfc569d and dropped.)
One LLM, one start-up curve; off and on each have a drafter of their own (its own trie, fed the
same tasks in the same order, as paraspec bench gives each system its own memory; every repeat
of a task starts from the memory as it was before the task).
Every task runs AR, off, on back to back, the order rotating, so the machine's drift hits all
three alike. Per task the median over repeats; per set the median over tasks of each one's
tokens/s over AR's, as paraspec bench reports, and the geometric mean of on over off. Outputs
must be identical to AR's: the switches only change which steps draft and how much.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import statistics

from paraspec import LLM, SamplingParams
from paraspec.api import sequence_stats
from paraspec.bench.tasks import load_task_set
from paraspec.config import parse_plugin_params


def run(llm: LLM, task, drafter, on: bool) -> tuple[float, list[int]]:
    """One greedy run with the switch on or off."""
    engine = llm.engine
    engine.draft_gate = on
    params = SamplingParams(temperature=0, max_tokens=task.max_new_tokens, stop=list(task.stop))
    (seq,) = engine.add_request(task.prompt_ids(llm.tokenizer), params, drafter=drafter)
    engine.run_until_done()
    return sequence_stats(seq)["tokens_per_s"], list(seq.output)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--switch", choices=("gate",), default="gate")
    ap.add_argument("--tasks", default="chat,humaneval,grounded")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--plugin", default='{"plugin_type": "hybrid"}')
    args = ap.parse_args()
    llm = LLM(args.model)
    plugin = parse_plugin_params(json.loads(args.plugin), llm.config.speculation_gamma)
    print("start-up cost curve t(k)/t(1):", {k: round(llm.engine.cost(k), 2) for k in (2, 4, 8, 16)})
    for name in args.tasks.split(","):
        memory = {"off": llm.engine.drafters.private(plugin), "on": llm.engine.drafters.private(plugin)}
        ratios: dict[str, list[float]] = {"off": [], "on": []}
        log_on_off: list[float] = []
        for i, task in enumerate(load_task_set(name, args.n, 0)):
            speed: dict[str, list[float]] = {"ar": [], "off": [], "on": []}
            after: dict[str, object] = {}
            for r in range(args.repeats):
                kinds = ["ar", "off", "on"][(i + r) % 3:] + ["ar", "off", "on"][:(i + r) % 3]
                ids = {}
                for k in kinds:
                    # (deepcopy fills its memo: a new one per copy, the engine and model kept out)
                    keep = {id(o): o for o in (llm.engine, llm.runner, llm.model, llm.tokenizer)}
                    drafter = None if k == "ar" else copy.deepcopy(memory[k], keep)
                    tps, ids[k] = run(llm, task, drafter, k == "on")
                    speed[k].append(tps)
                    after.setdefault(k, drafter)
                if not ids["ar"] == ids["off"] == ids["on"]:
                    raise SystemExit(f"{task.task_id}: output differs from AR's")
            memory = {k: after[k] for k in memory}      # the first run's memory goes on
            med = {k: statistics.median(v) for k, v in speed.items()}
            for k in ratios:
                ratios[k].append(med[k] / med["ar"])
            log_on_off.append(math.log(med["on"] / med["off"]))
            print(f"{name:10s} {task.task_id[:24]:24s} AR {med['ar']:6.1f} tok/s  off {med['off'] / med['ar']:.2f}x"
                  f"  on {med['on'] / med['ar']:.2f}x", flush=True)
        print(f"{name}: median over tasks  {args.switch} off {statistics.median(ratios['off']):.3f}x  "
              f"on {statistics.median(ratios['on']):.3f}x AR;  on / off geometric mean "
              f"{math.exp(sum(log_on_off) / len(log_on_off)):.3f}", flush=True)
        print()


if __name__ == "__main__":
    main()
