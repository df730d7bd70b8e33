"""A token trie's shared output memory on disk: a versioned, compressed .npz of (parent, token,
count) arrays in breadth-first order; prompt counts belong to live requests and are not saved.
Loading and merging add counts along the saved paths (a mixin of TokenTrie, trie.py), from a
trie file or the trie part of an engine's memory file (memory_file.py reads and checks both).
"""
from __future__ import annotations

import json
import os

import numpy as np

from .memory_file import TRIE_FORMAT, TRIE_VERSION, MemoryFileError, read_memory_file

SUPER_ROOT = 0
TrieFileError = MemoryFileError     # one error for every saved memory, trie-only or not


class TrieFile:
    """save / load / merge; the node arrays and _make_room, _child, _alloc are TokenTrie's."""

    def _output_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Nodes with output counts, breadth first: (parent index, token, count), where index 0
        is the super-root and node i of the arrays is index i + 1."""
        parents, toks, counts = [], [], []
        frontier = [(SUPER_ROOT, 0)]
        while frontier:
            nxt = []
            for node, idx in frontier:
                for t, c in self._items(node):
                    if self._out[c] > 0:
                        parents.append(idx)
                        toks.append(t)
                        counts.append(self._out[c])
                        nxt.append((c, len(toks)))
            frontier = nxt
        return (np.asarray(parents, dtype=np.int32), np.asarray(toks, dtype=np.int32),
                np.asarray(counts, dtype=np.int64))

    def save(self, path: str | os.PathLike) -> None:
        """Write the shared output memory (prompt counts belong to live requests: not saved).
        The file is replaced atomically, so a crash never leaves half a trie."""
        parent, token, count = self._output_arrays()
        meta = json.dumps({"format": TRIE_FORMAT, "version": TRIE_VERSION, "window": self.window})
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "wb") as f:
            np.savez_compressed(f, meta=np.array(meta), parent=parent, token=token, count=count)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, max_nodes: int | None = None):
        """Read a file written by save(). max_nodes defaults to max(2**20, the file's nodes)."""
        parent, token, count, window = _read_trie_file(path)
        trie = cls(max_nodes or max(1 << 20, len(token)), window)
        trie._add_output_arrays(parent, token, count)
        return trie

    def merge(self, other: "TrieFile") -> None:
        """Add another trie's output memory to this one (e.g. memory saved by another server)."""
        self._add_output_arrays(*other._output_arrays())

    def merge_file(self, path: str | os.PathLike) -> None:
        """Add the memory saved in a file to this trie, in place (a trie shared by drafters
        keeps its identity). Paths deeper than this trie's window are cut."""
        parent, token, count, _ = _read_trie_file(path)
        self._add_output_arrays(parent, token, count)

    def _add_output_arrays(self, parent: np.ndarray, token: np.ndarray, count: np.ndarray) -> None:
        """Add counts along the given paths (a merge keeps counts non-increasing down a path)."""
        self._make_room(min(len(token), self.max_nodes))
        ids = [SUPER_ROOT] * (len(token) + 1)
        out, depth = self._out, self._depth
        for i, (p, t, c) in enumerate(zip(parent.tolist(), token.tolist(), count.tolist()), 1):
            at = ids[p]
            if at < 0 or depth[at] >= self.window:
                ids[i] = -1                 # beyond the window or the budget: the subtree too
                continue
            node = self._child(at, t)
            if node < 0:
                node = self._alloc(at, t)
            ids[i] = node
            if node >= 0:
                out[node] += c


def _read_trie_file(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The trie part of a memory file (memory_file.py), or of a trie-only one."""
    c = read_memory_file(path)
    return c.parent, c.token, c.count, c.window
