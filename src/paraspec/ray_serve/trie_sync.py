"""A replica's side of the replicated drafting memory (trie_hub.py): bootstrap from the TrieHub
before taking traffic, then every sync_interval_s push this replica's finished output streams as
one delta and pull the others' deltas. Runs as an asyncio task beside the requests; it reads and
merges the trie only through AsyncEngine.call (the loop thread owns the trie). A dead or slow hub
never fails a request: the replica keeps drafting from its own trie and retries next interval
(the hub's handle is looked up again, which recreates a hub that was killed for good)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field

import ray

from ..decoding.memory.memory_file import TrieArrays, add_output_arrays
from ..decoding.memory.trie import TokenTrie
from ..engine import Engine
from ..server.async_engine import AsyncEngine
from .options import HUB_NAMESPACE, RayServeOptions
from .trie_hub import DeltaRecorder, TrieHub

logger = logging.getLogger("paraspec.ray_serve")

HUB_CALL_TIMEOUT_S = 10.0
MAX_PENDING_DELTAS = 64  # unpushed deltas kept while the hub is away (older ones dropped)


def hub_handle(opts: RayServeOptions, max_nodes: int, window: int):
    """The TrieHub actor: named, detached, restarted forever, no CPU of its own (created by the
    first replica that asks; the others get the same one)."""
    return (
        ray.remote(TrieHub)
        .options(
            name=opts.hub_name,
            namespace=HUB_NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=-1,
            num_cpus=0,
        )
        .remote(max_nodes, window, opts.hub_file(), opts.snapshot_interval_s)
    )


@dataclass
class SyncStats:
    pushed: int = 0
    merged: int = 0  # deltas (or snapshots) merged from the hub
    failures: int = 0
    last_ok: float = 0.0
    last_error: str | None = None
    bootstrapped: int = field(default=0)  # nodes the bootstrap snapshot brought


class TrieSync:
    def __init__(
        self, engine: AsyncEngine, trie: TokenTrie, opts: RayServeOptions, replica_id: str
    ):
        self.engine, self.trie, self.opts, self.replica_id = engine, trie, opts, replica_id
        self.recorder = DeltaRecorder(trie.window)
        self.pending: deque[tuple[int, TrieArrays]] = deque()
        self.seq = 0
        self.epoch: str | None = None
        self.version = -1
        self.stats = SyncStats()
        self._hub = None
        trie.journal = []  # set before any request: every output is recorded

    def hub(self):
        if self._hub is None:
            self._hub = hub_handle(self.opts, self.trie.max_nodes, self.trie.window)
        return self._hub

    async def bootstrap(self, timeout_s: float = HUB_CALL_TIMEOUT_S) -> None:
        """Pull the hub's memory before the first request (bounded: a missing hub only delays)."""
        try:
            await asyncio.wait_for(self._pull(), timeout_s)
            self.stats.bootstrapped = len(self.trie)
        except Exception as e:
            self._failed(e)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.opts.sync_interval_s)
            try:
                await asyncio.wait_for(self.sync_once(), HUB_CALL_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self._failed(e)

    async def sync_once(self) -> None:
        journal = await self.engine.call(_take_journal)
        self.recorder.feed(journal)
        delta = self.recorder.take()
        if delta is not None:
            self.pending.append((self.seq, delta))
            self.seq += 1
            while len(self.pending) > MAX_PENDING_DELTAS:
                self.pending.popleft()
        while self.pending:
            seq, d = self.pending[0]
            await self.hub().push.remote(self.replica_id, seq, d)
            self.pending.popleft()
            self.stats.pushed += 1
        await self._pull()
        self.stats.last_ok = time.time()

    async def _pull(self) -> None:
        got = await self.hub().pull.remote(self.replica_id, self.epoch, self.version)
        parts = [got["snapshot"]] if "snapshot" in got else got["deltas"]
        if parts:
            await self.engine.call(lambda _engine: _merge(self.trie, parts))
            self.stats.merged += len(parts)
        self.epoch, self.version = got["epoch"], got["version"]

    def _failed(self, e: BaseException) -> None:
        self.stats.failures += 1
        self.stats.last_error = f"{type(e).__name__}: {e}"[:300]
        self._hub = None  # look it up again next time (restarted or recreated)
        logger.warning(
            "trie sync with the TrieHub failed (the replica keeps its own memory): %s",
            self.stats.last_error,
        )


def _take_journal(engine: Engine) -> list:
    trie = engine.drafters.trie()
    journal, trie.journal = trie.journal or [], []
    return journal


def _merge(trie: TokenTrie, parts: list[TrieArrays]) -> None:
    for parent, token, count in parts:
        add_output_arrays(trie, parent, token, count)
