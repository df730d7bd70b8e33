"""bench/peak_rss: each block gets its own peak, although every system runs in one process."""

from __future__ import annotations

import mmap
import sys

import pytest

from paraspec.bench.peak_rss import PeakRSS


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
def test_the_peak_of_a_block_above_its_start_and_reset_for_the_next():
    with PeakRSS() as big:
        # a fresh anonymous mapping, not bytearray: after a long suite malloc may hand back heap pages
        # that are resident already, and then the RSS (rightly) does not grow
        block = mmap.mmap(-1, 64 << 20)
        for page in range(0, len(block), mmap.PAGESIZE):
            block[page] = 1  # touch every page: resident
    block.close()
    with PeakRSS() as small:
        pass
    assert big.delta >= 60 << 20
    assert small.delta < 16 << 20  # the previous block's peak was reset


def test_without_proc_the_delta_stays_unmeasured(monkeypatch):
    def no_proc(*_, **__):
        raise OSError("no /proc here")

    monkeypatch.setattr("builtins.open", no_proc)
    with PeakRSS() as m:
        pass
    assert m.delta is None
