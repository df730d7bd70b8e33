"""bench/peak_rss: each block gets its own peak, although every system runs in one process."""
from __future__ import annotations

import sys

import pytest

from paraspec.bench.peak_rss import PeakRSS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
def test_the_peak_of_a_block_above_its_start_and_reset_for_the_next():
    with PeakRSS() as big:
        block = bytearray(64 << 20)
        block[::4096] = b"x" * len(block[::4096])      # touch every page: resident
    del block
    with PeakRSS() as small:
        pass
    assert big.delta >= 60 << 20
    assert small.delta < 16 << 20                      # the previous block's peak was reset


def test_without_proc_the_delta_stays_unmeasured(monkeypatch):
    def no_proc(*_, **__):
        raise OSError("no /proc here")
    monkeypatch.setattr("builtins.open", no_proc)
    with PeakRSS() as m:
        pass
    assert m.delta is None
