"""How steady the engine's start-up cost probe is (ModelRunner.forward_cost, which drafters size
their trees by): the probe run --probes times in one process, t(4) / t(8) / t(16) each time.

    python benchmarks/cost_probe.py [--model default] [--probes 3] [--rounds 5]

Run it in several fresh processes too: the first probe of a process is the one an engine uses.
"""
from __future__ import annotations

import argparse

from paraspec import LLM


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--probes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    runner = LLM(args.model).runner
    for i in range(args.probes):
        runner._cost = None                  # measure again, as a new engine would
        c = runner.forward_cost(rounds=args.rounds)
        print(f"probe {i}: t(4) {c[4]:.2f}  t(8) {c[8]:.2f}  t(16) {c[16]:.2f}", flush=True)


if __name__ == "__main__":
    main()
