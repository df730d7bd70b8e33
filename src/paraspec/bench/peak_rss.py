"""Peak resident memory of one bench run, in a process every system shares."""

from __future__ import annotations

import re

_HWM = re.compile(r"VmHWM:\s+(\d+) kB")
_RSS = re.compile(r"VmRSS:\s+(\d+) kB")


class PeakRSS:
    """Peak resident memory of this process during a block, above its RSS at the start.

    Linux keeps the peak (VmHWM) per process and resets it to the current RSS when "5" is written
    to /proc/self/clear_refs, so each run gets its own peak although all systems share a process.
    Where that is impossible, `delta` stays None (no sampling thread: it would steal a core)."""

    def __init__(self) -> None:
        self.delta: int | None = None
        self._base: int | None = None

    @staticmethod
    def _read(pattern: re.Pattern) -> int:
        with open("/proc/self/status") as f:
            return int(pattern.search(f.read()).group(1)) * 1024

    def __enter__(self) -> "PeakRSS":
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self._base = self._read(_RSS)
        except (OSError, AttributeError):
            self._base = None
        return self

    def __exit__(self, *exc) -> None:
        if self._base is not None:
            self.delta = max(0, self._read(_HWM) - self._base)
