"""One engine switch on and off, side by side: decode tokens/s of each task for plain decoding
(AR), a drafter with the switch off, and the same drafter with it on.

    python benchmarks/switch_ab.py [--switch gate] [--tasks chat,humaneval,grounded] [--n 10]
                                   [--repeats 3] [--plugin '{"plugin_type": "hybrid"}']

Switches: `gate`, the draft gate (decoding/gate.py, Engine.draft_gate). (`cost`, the curve
corrected by the engine's own steps, was measured with it at dfc569d and dropped.)
One LLM, one start-up curve; AR, off and on are paraspec bench's own systems (off and on each
with its own memory, fed the same tasks in the same order; every repeat of a task starts from
the memory as it was before the task).
Every task runs AR, off, on back to back, the order rotating, so the machine's drift hits all
three alike. Per task the median over repeats; per set the median over tasks of each one's
tokens/s over AR's, as paraspec bench reports, and the geometric mean of on over off. Outputs
must be identical to AR's: the switches only change which steps draft and how much.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics

from paraspec import LLM
from paraspec.bench.base import GREEDY, BenchTask, RunParams
from paraspec.bench.paraspec_systems import ParaspecSystem
from paraspec.bench.tasks import load_task_set


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
    plugin = json.loads(args.plugin)
    print("start-up cost curve t(k)/t(1):", {k: round(llm.engine.cost(k), 2) for k in (2, 4, 8, 16)})
    systems = {"ar": ParaspecSystem("ar", llm, None), "off": ParaspecSystem("off", llm, plugin),
               "on": ParaspecSystem("on", llm, plugin)}
    kinds = list(systems)
    for name in args.tasks.split(","):
        for system in systems.values():
            system.begin_set(name)
        ratios: dict[str, list[float]] = {"off": [], "on": []}
        log_on_off: list[float] = []
        for i, t in enumerate(load_task_set(name, args.n, 0)):
            task = BenchTask(t.task_set, t.task_id, t.prompt_ids(llm.tokenizer), t.max_new_tokens, tuple(t.stop))
            speed: dict[str, list[float]] = {k: [] for k in kinds}
            for system in systems.values():
                system.begin_task()
            for r in range(args.repeats):
                ids = {}
                for k in kinds[(i + r) % 3:] + kinds[:(i + r) % 3]:
                    llm.engine.draft_gate = k == "on"
                    m = systems[k].run(task, RunParams(GREEDY, repeat=r))
                    speed[k].append(m.decode_tokens_per_s)
                    ids[k] = m.token_ids
                if not ids["ar"] == ids["off"] == ids["on"]:
                    raise SystemExit(f"{task.task_id}: output differs from AR's")
            for system in systems.values():
                system.end_task()
            med = {k: statistics.median(v) for k, v in speed.items()}
            for k in ratios:
                ratios[k].append(med[k] / med["ar"])
            log_on_off.append(math.log(med["on"] / med["off"]))
            print(f"{name:10s} {task.task_id[:24]:24s} AR {med['ar']:6.1f} tok/s  off {med['off'] / med['ar']:.2f}x"
                  f"  on {med['on'] / med['ar']:.2f}x", flush=True)
        print(f"{name}: median over tasks  {args.switch} off {statistics.median(ratios['off']):.3f}x  "
              f"on {statistics.median(ratios['on']):.3f}x AR;  on / off geometric mean "
              f"{math.exp(sum(log_on_off) / len(log_on_off)):.3f}\n", flush=True)


if __name__ == "__main__":
    main()
