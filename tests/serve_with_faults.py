"""`paraspec serve` (the real command, cli.main) with faults a test asks for by a request's seed:

    python tests/serve_with_faults.py serve --model ... [any serve flags]

- seed FAULT_SEED: while such a request is in the engine, Engine.step raises (a bug in a step,
  which fails every request in flight);
- seed SLOW_SEED: while such a request is in the engine, each step first sleeps SLOW_STEP_S, so a
  stream of N tokens lasts at least N * SLOW_STEP_S whatever the CPU.

The patch lives here, in the tests, so nothing in the package can be switched on to break a
production server; the rest of the process (flags, config, uvicorn beside the engine loop on the
main thread, the signal handlers) is the shipped one. A greedy request ignores its seed, so its
tokens are the same as without one.
"""

from __future__ import annotations

import sys
import time

FAULT_SEED = 66601
SLOW_SEED = 66602
SLOW_STEP_S = 0.05


def install() -> None:
    from paraspec.engine import Engine

    step = Engine.step

    def faulty_step(self):
        seeds = {s.params.seed for s in self.sequences()}
        if FAULT_SEED in seeds:
            raise RuntimeError("injected engine step fault")
        if SLOW_SEED in seeds:
            time.sleep(SLOW_STEP_S)
        return step(self)

    Engine.step = faulty_step


if __name__ == "__main__":
    install()
    from paraspec.cli import main

    sys.exit(main())
