"""What memory_decoding's own Python work costs, against a one-row decode step: the modelled
speedup of a model-free replay (paraspec.tools.replay) with the drafter's CPU time counted.

    python benchmarks/drafting_overhead.py [--step-ms 7] [--n 6] [--min-wrong 0.95]

Two kinds of recorded requests: `wrong`, common tokens with nothing to copy (the memory's drafts
are nearly all wrong, so the drafter should back off and cost almost nothing), and `copy`, answers
quoting two spans of their prompts. Per kind and drafter setting: steps, drafted and accepted
nodes, tokens/step, the drafter's microseconds per step, the speedup by forward cost alone, and
the speedup with drafting time at --step-ms per one-row step. On a slow CPU the last two part:
that gap is the drafter's overhead. Exit status 1 when a `wrong` speedup falls below --min-wrong
(the check tests/decoding/test_memory.py makes by counts; seconds belong here).
"""

from __future__ import annotations

import argparse
import json
import random

from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.drafters.memory_decoding import MemoryDecodingParams, MemoryDrafter
from paraspec.tools.replay import Record, replay

EOS = 2
# SmolLM2-135M fp32 on a 2-core CPU, as in tests/decoding/test_memory.py: drafts must earn their rows
STEEP_COST = {1: 1.0, 2: 1.19, 4: 1.19, 8: 1.23, 16: 1.66, 32: 2.51}


def records(kind: str, n: int, seed: int = 0) -> list[Record]:
    rng = random.Random(seed)
    recs = []
    for _ in range(n):
        # (drawn for both: the test's records)
        prompt = [rng.randrange(3, 3000) for _ in range(300)]
        if kind == "copy":
            a, b = rng.randrange(0, 100), rng.randrange(150, 250)
            output = (
                prompt[a : a + 40] + [rng.randrange(3, 3000) for _ in range(5)] + prompt[b : b + 40]
            )
        else:
            output = [rng.randrange(3, 60) for _ in range(150)]
            prompt = [rng.randrange(3, 60) for _ in range(300)]
        recs.append(Record(prompt, output))
    return recs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--step-ms", type=float, default=7.0, help="a one-row decode step on this machine"
    )
    ap.add_argument("--n", type=int, default=6, help="requests per kind")
    ap.add_argument("--cost", default=json.dumps(STEEP_COST), help="t(k)/t(1) as JSON")
    ap.add_argument("--min-wrong", type=float, default=0.95)
    args = ap.parse_args()
    cost = CostModel({int(k): float(v) for k, v in json.loads(args.cost).items()})
    t1 = args.step_ms / 1e3
    worst = float("inf")
    print(
        f"{'kind':6} {'setting':14} {'steps':>6} {'drafted':>8} {'accepted':>8} {'tok/step':>8} "
        f"{'us/step':>8} {'by rows':>8} {'with CPU':>8}"
    )
    for kind in ("wrong", "copy"):
        for setting, params in (
            ("static", {}),
            ("dynamic_algo", {"dynamic_algo": True}),
            ("chain", {"mode": "chain"}),
        ):
            drafter = MemoryDrafter(MemoryDecodingParams(**params), eos_token_ids=[EOS])
            rep = replay(drafter, records(kind, args.n), 15, cost)
            with_cpu = rep.speedup(t1)
            if kind == "wrong":
                worst = min(worst, with_cpu)
            print(
                f"{kind:6} {setting:14} {rep.steps:6d} {rep.drafted:8d} {rep.accepted:8d} "
                f"{rep.tokens_per_step:8.2f} {rep.draft_us_per_step:8.1f} {rep.tokens / rep.cost:8.3f} "
                f"{with_cpu:8.3f}"
            )
    if worst < args.min_wrong:
        print(
            f"wrong drafts cost {worst:.3f}x plain decoding with drafting time, below {args.min_wrong}"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
