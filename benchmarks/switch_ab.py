"""One engine switch off and on, side by side in one run: the draft gate (decode tokens/s of AR,
a drafter with the gate off and with it on) or the fp16 KV cache (forward ms and decode tokens/s
against the fp32 cache).

    python benchmarks/switch_ab.py [--switch gate] [--tasks chat,humaneval,grounded] [--n 10]
                                   [--repeats 3] [--plugin '{"plugin_type": "hybrid"}']
    python benchmarks/switch_ab.py --switch kv16 [--contexts 256,1024,2048] [--rows 1,8]
                                   [--tasks grounded,humaneval] [--n 6]

`gate`, the draft gate (decoding/policy/gate.py, Engine.draft_gate). (`cost`, the curve corrected by
the engine's own steps, was measured with it at dfc569d and dropped.) One LLM, one start-up curve; AR, off and on are paraspec bench's own systems (off and on each
with its own memory, fed the same tasks in the same order; every repeat of a task starts from
the memory as it was before the task).
Every task runs AR, off, on back to back, the order rotating, so the machine's drift hits all
three alike. Per task the median over repeats; per set the median over tasks of each one's
tokens/s over AR's, as paraspec bench reports, and the geometric mean of on over off. Outputs
must be identical to AR's: the gate only changes which steps draft and how much.

`kv16`, kv_cache_dtype="fp16" against "fp32" (was kv_cache_dtype.py):
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
import json
import math
import random
import statistics
import time

import torch

from paraspec import LLM, SamplingParams
from paraspec.bench.base import GREEDY, BenchTask, RunParams
from paraspec.bench.paraspec_systems import ParaspecSystem
from paraspec.bench.tasks import load_task_set
from paraspec.model.kv_cache import KVCache
from paraspec.model.transformer import SeqInput

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def gate_ab(args) -> None:
    llm = LLM(args.model)
    plugin = json.loads(args.plugin)
    print(
        "start-up cost curve t(k)/t(1):", {k: round(llm.engine.cost(k), 2) for k in (2, 4, 8, 16)}
    )
    systems = {
        "ar": ParaspecSystem("ar", llm, None),
        "off": ParaspecSystem("off", llm, plugin),
        "on": ParaspecSystem("on", llm, plugin),
    }
    kinds = list(systems)
    for name in args.tasks.split(","):
        for system in systems.values():
            system.begin_set(name)
        ratios: dict[str, list[float]] = {"off": [], "on": []}
        log_on_off: list[float] = []
        for i, t in enumerate(load_task_set(name, args.n, 0)):
            task = BenchTask(
                t.task_set, t.task_id, t.prompt_ids(llm.tokenizer), t.max_new_tokens, tuple(t.stop)
            )
            speed: dict[str, list[float]] = {k: [] for k in kinds}
            for system in systems.values():
                system.begin_task()
            for r in range(args.repeats):
                ids = {}
                for k in kinds[(i + r) % 3 :] + kinds[: (i + r) % 3]:
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
            print(
                f"{name:10s} {task.task_id[:24]:24s} AR {med['ar']:6.1f} tok/s  off {med['off'] / med['ar']:.2f}x"
                f"  on {med['on'] / med['ar']:.2f}x",
                flush=True,
            )
        print(
            f"{name}: median over tasks  {args.switch} off {statistics.median(ratios['off']):.3f}x  "
            f"on {statistics.median(ratios['on']):.3f}x AR;  on / off geometric mean "
            f"{math.exp(sum(log_on_off) / len(log_on_off)):.3f}\n",
            flush=True,
        )


def forward_times(llm: LLM, contexts: list[int], rows: list[int], rounds: int) -> None:
    model = llm.model
    print(
        f"forward ms (median of {rounds}; {torch.get_num_threads()} threads), kernels {llm.kernels.label}"
    )
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
                model.forward(
                    torch.zeros(k, dtype=torch.long),
                    torch.arange(ctx, ctx + k),
                    [SeqInput(caches[name], k)],
                    torch.arange(k),
                )
                times[(k, name)].append(time.perf_counter() - t0)
        for k in rows:
            a, b = (1e3 * statistics.median(times[(k, n)]) for n in DTYPES)
            print(
                f"  context {ctx:5d}  rows {k:2d}: fp32 {a:6.2f}  fp16 {b:6.2f}  fp16/fp32 {b / a:.3f}"
            )


def decoding(model: str, task_sets: list[str], n: int) -> None:
    llms = {name: LLM(model, kv_cache_dtype=name) for name in DTYPES}
    hybrid = {"plugin_type": "hybrid"}
    print(
        f"decoding, greedy, tok/s ratio fp16 / fp32 (median over tasks), kernels {llms['fp32'].kernels.label}"
    )
    for set_name in task_sets:
        ratios = {"ar": [], "hybrid": []}
        lossless, same = True, 0
        tasks = load_task_set(set_name, n)
        for i, task in enumerate(tasks):
            runs = [(name, plugin) for name in DTYPES for plugin in (None, hybrid)]
            runs = runs[i % 4 :] + runs[: i % 4]
            out = {}
            for name, plugin in runs:
                llm = llms[name]
                ids = task.prompt_ids(llm.tokenizer)
                params = SamplingParams(
                    temperature=0, max_tokens=task.max_new_tokens, stop=list(task.stop)
                )
                o = llm.generate([ids], params, plugin_params=plugin)[0]
                out[(name, plugin is not None)] = (
                    o.token_ids,
                    len(o.token_ids) / o.stats["decode_s"],
                )
            for mode, drafted in (("ar", False), ("hybrid", True)):
                ratios[mode].append(out[("fp16", drafted)][1] / out[("fp32", drafted)][1])
            lossless &= all(out[(name, True)][0] == out[(name, False)][0] for name in DTYPES)
            same += out[("fp16", False)][0] == out[("fp32", False)][0]
        prompt = statistics.median(len(t.prompt_ids(llms["fp32"].tokenizer)) for t in tasks)
        print(
            f"  {set_name:10s} ({len(tasks)} tasks, median prompt {prompt:.0f} tokens): "
            f"AR {statistics.median(ratios['ar']):.3f}  hybrid {statistics.median(ratios['hybrid']):.3f}  "
            f"hybrid == AR per cache dtype: {'yes' if lossless else 'NO'}  "
            f"same output fp16 / fp32: {same}/{len(tasks)}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", default="default")
    ap.add_argument("--switch", choices=("gate", "kv16"), default="gate")
    ap.add_argument(
        "--tasks",
        default=None,
        help="task sets (default: gate chat,humaneval,grounded; kv16 grounded,humaneval)",
    )
    ap.add_argument(
        "--n",
        type=int,
        default=None,
        help="tasks per set (default: gate 10, kv16 6; kv16 0: forward only)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="gate: runs per task and system")
    ap.add_argument(
        "--plugin", default='{"plugin_type": "hybrid"}', help="gate: the drafter's plugin_params"
    )
    ap.add_argument(
        "--contexts", default="256,1024,2048", help="kv16: cached tokens of the forward timings"
    )
    ap.add_argument("--rows", default="1,8", help="kv16: new rows of the forward timings")
    ap.add_argument("--rounds", type=int, default=15, help="kv16: rounds of the forward timings")
    args = ap.parse_args()
    kv16 = args.switch == "kv16"
    args.tasks = args.tasks or ("grounded,humaneval" if kv16 else "chat,humaneval,grounded")
    args.n = args.n if args.n is not None else (6 if kv16 else 10)
    if not kv16:
        return gate_ab(args)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    forward_times(LLM(args.model), ints(args.contexts), ints(args.rows), args.rounds)
    if args.n:
        decoding(args.model, [s for s in args.tasks.split(",") if s], args.n)


if __name__ == "__main__":
    main()
