"""One bounded warning per unknown plugin_params key name.

Requests may carry any keys (a per-request plugin override): a warning per distinct text would
be kept for good by the warnings registry and the log, so a client sending a fresh 1 MiB key per
request could grow both without bound. Each name warns once, truncated, and at most MAX_NAMES
names are remembered (later ones are ignored silently).
"""

from __future__ import annotations

import threading
import warnings
from typing import Iterable

MAX_NAME = 40  # characters of a key name quoted in the warning
MAX_NAMES = 256  # distinct names warned about in a process

_seen: set[str] = set()
_lock = threading.Lock()


def warn_unknown_keys(plugin: str, keys: Iterable[object], known: Iterable[str]) -> None:
    fresh = []
    with _lock:
        for key in keys:
            name = str(key)
            name = name if len(name) <= MAX_NAME else name[:MAX_NAME] + "..."
            if name not in _seen and len(_seen) < MAX_NAMES:
                _seen.add(name)
                fresh.append(repr(name))
    if fresh:
        what = f"unknown key {fresh[0]}" if len(fresh) == 1 else f"unknown keys {', '.join(fresh)}"
        warnings.warn(
            f"plugin_params: {what} for {plugin} ignored (known: {', '.join(sorted(known))})",
            stacklevel=3,
        )


def forget() -> None:
    """Warn again about every name (tests)."""
    with _lock:
        _seen.clear()
