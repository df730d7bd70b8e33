"""gc_paused(): run a block with Python's cyclic garbage collector off.

Code that allocates a great many short-lived objects (parsing source files, reading a GGUF's
fields) triggers collections that each scan the whole heap, which is large once torch is
loaded: they can cost several times the work itself."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
