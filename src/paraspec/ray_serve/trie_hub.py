"""The replicated drafting memory: every replica drafts from its own trie, as `paraspec serve`
does; only the shared OUTPUT counts travel, asynchronously, never on a request's path.

    replica --push(replica_id, seq, delta)--> TrieHub (one named, detached Ray actor)
    replica <--pull(epoch, version)----------  merged deltas of the others since `version`,
                                               or a snapshot for a replica that has none yet

A delta is the output counts a replica added since its last push, as the trie arrays of a memory
file (parent, token, count; memory_file.py): its finished output streams replayed into an empty
trie. Merging adds counts (a G-counter: order does not matter), and (replica_id, seq) makes a
retried push a no-op. The hub's trie has the replicas' node budget (it prunes like theirs), its
log of deltas is bounded by the same budget, and it saves itself to a file that a restarted hub
(or cluster) loads back. Stale or lost counts cost acceptance only: verification keeps every
output exact.

This module is plain Python (no Ray import): trie_sync.py drives it from the replicas, and
deployments.py wraps TrieHub as an actor.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable

from ..decoding.memory.memory_file import (
    MemoryFileError,
    TrieArrays,
    add_output_arrays,
    merge_trie_file,
    output_arrays,
    save_trie_file,
)
from ..decoding.memory.trie import TokenTrie

logger = logging.getLogger("paraspec.ray_serve")


class TrieHub:
    def __init__(
        self,
        max_nodes: int,
        window: int,
        snapshot_path: str | None = None,
        snapshot_interval_s: float = 5.0,
    ):
        self.snapshot_path, self.snapshot_interval_s = snapshot_path, snapshot_interval_s
        self.trie = TokenTrie(max_nodes, window)
        self.loaded = 0
        if snapshot_path and os.path.exists(snapshot_path):
            try:
                merge_trie_file(snapshot_path, self.trie)
                self.loaded = len(self.trie)
            except MemoryFileError as e:  # a bad file must not keep the hub (and sync) down
                logger.warning("TrieHub: snapshot not loaded: %s", e)
        self.epoch = uuid.uuid4().hex  # a restarted hub is a new epoch: replicas resync
        self.version = 0
        self.log: deque[tuple[int, str, TrieArrays]] = deque()
        self.log_nodes = 0
        self.seen: dict[str, int] = {}  # replica -> last seq merged
        self.dirty = False
        self.saved_at = time.monotonic()

    def push(self, replica_id: str, seq: int, delta: TrieArrays) -> int:
        """Merge a replica's delta once; returns the hub's version."""
        if seq <= self.seen.get(replica_id, -1):
            return self.version
        self.seen[replica_id] = seq
        add_output_arrays(self.trie, *delta)
        self.version += 1
        self.log.append((self.version, replica_id, delta))
        self.log_nodes += len(delta[1])
        while self.log_nodes > self.trie.max_nodes and len(self.log) > 1:
            self.log_nodes -= len(self.log.popleft()[2][1])
        self.dirty = True
        self.maybe_save()
        return self.version

    def pull(self, replica_id: str, epoch: str | None, version: int) -> dict:
        """What a replica at (epoch, version) is missing. A replica with nothing yet (version < 0)
        gets the snapshot; one of an older epoch (the hub restarted) keeps what it has and resumes
        from now; one behind the log gets the snapshot added (it counts its own part twice:
        ranking only). Otherwise: the others' deltas since `version`."""
        base = {"epoch": self.epoch, "version": self.version}
        if version < 0:
            return base | {"snapshot": output_arrays(self.trie)}
        if epoch != self.epoch:
            return base | {"deltas": []}
        if version < self.version and (not self.log or self.log[0][0] > version + 1):
            return base | {"snapshot": output_arrays(self.trie)}
        return base | {"deltas": [d for v, r, d in self.log if v > version and r != replica_id]}

    def stats(self) -> dict:
        return {
            "epoch": self.epoch,
            "version": self.version,
            "nodes": len(self.trie),
            "loaded": self.loaded,
            "log": len(self.log),
            "replicas": len(self.seen),
        }

    def lookup(self, path: list[int]) -> int:
        return output_count(self.trie, path)

    def maybe_save(self, force: bool = False) -> bool:
        if not self.snapshot_path or not self.dirty:
            return False
        if not force and time.monotonic() - self.saved_at < self.snapshot_interval_s:
            return False
        os.makedirs(os.path.dirname(os.path.abspath(self.snapshot_path)), exist_ok=True)
        save_trie_file(self.snapshot_path, self.trie)
        self.dirty, self.saved_at = False, time.monotonic()
        return True


def output_count(trie: TokenTrie, path: list[int]) -> int:
    """The shared output count at the end of a token path (0: not in the memory)."""
    node = trie.lookup(path)
    return trie.nodes.out[node] if node >= 0 else 0


@dataclass
class DeltaRecorder:
    """Turns a trie's journal (its output appends and closes) into deltas of finished streams.
    An open stream waits until it closes, so its windows are replayed whole and counted once."""

    window: int
    max_open: int = 4096
    open: dict[Hashable, list[int]] = field(default_factory=dict)
    finished: list[list[int]] = field(default_factory=list)

    def feed(self, journal: list[tuple[Hashable, list[int] | None]]) -> None:
        for stream, toks in journal:
            if toks is not None:
                self.open.setdefault(stream, []).extend(toks)
            elif stream in self.open:
                self.finished.append(self.open.pop(stream))
        while len(self.open) > self.max_open:  # a stream never closed: share what it has
            self.finished.append(self.open.pop(next(iter(self.open))))

    def take(self) -> TrieArrays | None:
        if not self.finished:
            return None
        total = sum(len(t) for t in self.finished)
        trie = TokenTrie(max(1, total * self.window), self.window)
        for i, toks in enumerate(self.finished):
            trie.append(i, toks)
            trie.close(i)
        self.finished = []
        return output_arrays(trie)
