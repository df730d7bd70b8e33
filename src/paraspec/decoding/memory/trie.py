"""Token trie: the memory behind memory_decoding (Ant Group's Lookahead trie, bounded and saveable).

A path super-root -> a -> b -> c ... records "after a came b, then c, ...". Each stored path is a
window of a token stream: at most `window` tokens starting at one position (the first token is the
anchor). Counts live on nodes and come in two kinds:
  * output counts (key OUTPUT): shared by every request and persistent: the cross-request memory;
  * prompt counts (key = a unique request id): seen only by that request, dropped by release().

This module is the store (nodes, insertion, release, prune); drafting from it is trie_match.py,
saving and loading trie_file.py.

Layout: a struct of arrays indexed by node id. The hot counters are Python lists (bumping a list
item is ~2.5x faster than an array or numpy scalar). Children: None for a leaf, the child's id for
a single child (9 nodes in 10: a one-entry dict would cost 224 bytes), a dict token -> id for more.
Freed ids are reused. About 80 bytes a node.

Invariants that make freeing cheap and safe (check_invariants() asserts them):
  * every node but the super-root has out > 0 or pin > 0 (pin = number of live requests whose
    prompt passes through it); a node nobody counts is freed at once;
  * counts never grow down a path (a child is only reached through its parent, decay rounds up),
    so "the nodes of count <= c, deepest first" always make up whole subtrees.
"""
from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

import numpy as np

from .trie_file import SUPER_ROOT, TrieFile, TrieFileError  # noqa: F401  (TrieFileError: re-exported)
from .trie_match import OUTPUT, TrieMatch

_LOW_WATER = 0.75           # prune() shrinks to this fraction of max_nodes: amortises its O(n) cost
_CHUNK = 1024               # positions inserted between two budget checks
_PROMPT_SHARE = 0.5         # live prompts may pin at most this fraction of max_nodes
_FREE = -2                  # parent of a freed node id


@dataclass
class TrieStats:
    nodes: int              # live nodes, the super-root excluded
    max_nodes: int
    output_nodes: int       # nodes with a shared output count
    active_prompts: int     # requests whose prompt counts are held
    open_streams: int       # requests whose output is being appended
    window: int
    pinned_nodes: int = 0   # nodes a live prompt pins
    prompt_children: int = 0    # requests whose prompt-only children are indexed


class _Stream:
    """Incremental output insertion: one open path per recent position, so a token is searchable
    as soon as it is committed (MindIE and PIA wait for a full window of later tokens)."""
    __slots__ = ("cursors", "epoch")

    def __init__(self, epoch: int) -> None:
        self.cursors: list[int] = []    # node reached by each open path, oldest first; -1 = closed
        self.epoch = epoch


class TokenTrie(TrieMatch, TrieFile):
    def __init__(self, max_nodes: int = 1 << 20, window: int = 18) -> None:
        if max_nodes < 1:
            raise ValueError(f"TokenTrie: max_nodes={max_nodes} must be >= 1")
        if not 2 <= window <= 255:
            raise ValueError(f"TokenTrie: window={window} must be in [2, 255]")
        self.max_nodes = max_nodes
        self.window = window
        self._tok = array("i", [-1])
        self._parent = array("i", [-1])
        self._depth = array("B", [0])
        self._kids: list[None | int | dict[int, int]] = [None]
        self._out: list[int] = [0]
        self._pin: list[int] = [0]
        self._free: list[int] = []
        self._prompts: dict[Hashable, dict[int, int]] = {}     # request -> node -> prompt count
        self._streams: dict[Hashable, _Stream] = {}
        self._epoch = 0             # bumped by prune: open stream paths close, caches drop
        self._pinned_full = False   # the last automatic prune could not reach its target
        self._n_pinned = 0          # nodes with pin > 0
        # when a list: every output append / close is recorded here, so a replica can replay
        # its new output counts elsewhere (paraspec.ray_serve's trie sync); None costs nothing
        self.journal: list[tuple[Hashable, list[int] | None]] | None = None
        self._top: dict[int, tuple[int, list[tuple[int, int]]]] = {}      # see _ranked
        self._prompt_kids: dict[Hashable, dict[int, list[tuple[int, int]]]] = {}

    # ---------------------------------------------------------------- nodes
    @property
    def n_nodes(self) -> int:
        return len(self._tok) - 1 - len(self._free)

    def __len__(self) -> int:
        return self.n_nodes

    def stats(self) -> TrieStats:
        return TrieStats(self.n_nodes, self.max_nodes, sum(1 for c in self._out if c > 0),
                         len(self._prompts), len(self._streams), self.window, self._n_pinned, len(self._prompt_kids))

    def _child(self, node: int, tok: int) -> int:
        k = self._kids[node]
        if k is None:
            return -1
        if k.__class__ is int:
            return k if self._tok[k] == tok else -1
        return k.get(tok, -1)

    def _items(self, node: int) -> Iterable[tuple[int, int]]:
        """(token, child) pairs of a node."""
        k = self._kids[node]
        if k is None:
            return ()
        if k.__class__ is int:
            return ((self._tok[k], k),)
        return k.items()

    def _link(self, parent: int, tok: int, node: int) -> None:
        k = self._kids[parent]
        if k is None:
            self._kids[parent] = node
        elif k.__class__ is int:
            self._kids[parent] = {self._tok[k]: k, tok: node}
        else:
            k[tok] = node

    def _unlink(self, node: int) -> None:
        parent = self._parent[node]
        k = self._kids[parent]
        if k.__class__ is int:
            self._kids[parent] = None
        elif k is not None:
            del k[self._tok[node]]
            if len(k) == 1:
                self._kids[parent] = next(iter(k.values()))

    def _alloc(self, parent: int, tok: int) -> int:
        """A new child of `parent` with no counts, or -1 when the node budget is spent."""
        depth = self._depth[parent] + 1
        if self._free:
            node = self._free.pop()
            self._tok[node], self._parent[node], self._depth[node] = tok, parent, depth
        elif len(self._tok) <= self.max_nodes:
            node = len(self._tok)
            self._tok.append(tok)
            self._parent.append(parent)
            self._depth.append(depth)
            self._kids.append(None)
            self._out.append(0)
            self._pin.append(0)
        else:
            return -1
        self._link(parent, tok, node)
        return node

    def _new_chain(self, parent: int, toks: list[int], limit: int) -> list[int]:
        """Allocate toks as a chain below `parent`, at most `limit` nodes and as far as the
        budget allows: the bulk path of insert() (below a new node everything is new)."""
        r = min(len(toks), self.max_nodes - self.n_nodes, limit)
        if r <= 0:
            return []
        reuse = min(r, len(self._free))
        ids = [self._free.pop() for _ in range(reuse)]
        base = len(self._tok)
        ids += range(base, base + r - reuse)
        toks = toks[:r]
        parents = [parent] + ids[:-1]
        links: list[int | None] = ids[1:] + [None]
        d0 = self._depth[parent] + 1
        for i in range(reuse):
            node = ids[i]
            self._tok[node], self._parent[node], self._depth[node] = toks[i], parents[i], d0 + i
            self._kids[node] = links[i]
        if reuse < r:
            self._tok.extend(toks[reuse:])
            self._parent.extend(parents[reuse:])
            self._depth.extend(range(d0 + reuse, d0 + r))
            self._kids.extend(links[reuse:])
            self._out.extend([0] * (r - reuse))
            self._pin.extend([0] * (r - reuse))
        self._link(parent, toks[0], ids[0])
        return ids

    def _make_room(self, need: int) -> None:
        # when live prompts pin the budget, pruning again frees nothing (and decays every
        # count): new windows are cut short instead until release() unpins nodes
        if self.n_nodes + need > self.max_nodes and not self._pinned_full:
            target = max(0, min(int(self.max_nodes * _LOW_WATER), self.max_nodes - need))
            self.prune(target)
            self._pinned_full = self.n_nodes > target

    # ---------------------------------------------------------------- insertion
    def insert(self, tokens: Sequence[int], key: Hashable = OUTPUT, window: int | None = None) -> None:
        """Store the window (at most `window` tokens) starting at every position of `tokens`.

        key=OUTPUT adds to the shared output memory; any other key is a request id whose prompt
        counts only that request sees, until release(key). Live prompts together may create at
        most half of max_nodes (later windows are cut short), so that a huge prompt cannot evict
        the whole memory. Callers cut stop tokens out first.
        """
        w = min(window or self.window, self.window)
        toks = [int(t) for t in tokens]
        if key is not OUTPUT:
            self._prompt_kids.pop(key, None)
        # in chunks: counts are committed before the next chunk may prune (uncounted nodes
        # would be freed), and one huge input cannot ask prune for the whole budget
        for start in range(0, len(toks), _CHUNK):
            limit = self.max_nodes // 4
            if key is not OUTPUT:
                limit = min(limit, int(self.max_nodes * _PROMPT_SHARE) - self._n_pinned)
            self._make_room(min(_CHUNK * w, max(limit, 0)))
            visited = self._walk_windows(toks, start, min(start + _CHUNK, len(toks)), w, limit)
            self._count(visited, key)

    def _walk_windows(self, toks: list[int], start: int, stop: int, w: int, limit: int) -> list[int]:
        """Nodes on the windows starting at positions [start, stop); at most `limit` new ones."""
        kids, tok_of = self._kids, self._tok
        visited: list[int] = []
        seen = visited.append
        n = len(toks)
        for i in range(start, stop):
            node, j, end = SUPER_ROOT, i, min(i + w, n)
            while j < end:
                k, t = kids[node], toks[j]
                if k is None:
                    break
                if k.__class__ is int:
                    if tok_of[k] != t:
                        break
                    child = k
                else:
                    child = k.get(t, -1)
                    if child < 0:
                        break
                node = child
                seen(node)
                j += 1
            if j < end and limit > 0:
                new = self._new_chain(node, toks[j:end], limit)
                visited += new
                limit -= len(new)
        return visited

    def _count(self, visited: list[int], key: Hashable) -> None:
        counts = Counter(visited)
        if key is OUTPUT:
            out = self._out
            for node, c in counts.items():
                out[node] += c
            return
        pin = self._pin
        pc = self._prompts.setdefault(key, {})
        for node, c in counts.items():
            if node in pc:
                pc[node] += c
            else:
                pc[node] = c
                pin[node] += 1
                self._n_pinned += pin[node] == 1

    def append(self, stream: Hashable, tokens: Iterable[int]) -> None:
        """Add the tokens a request just committed to the shared output memory: every open
        window of the stream gets the next token, and each token opens a window."""
        st = self._streams.get(stream)
        if st is None:
            st = self._streams[stream] = _Stream(self._epoch)
        toks = [int(t) for t in tokens]
        if self.journal is not None:
            self.journal.append((stream, toks))
        keep = self.window - 1
        for start in range(0, len(toks), _CHUNK):
            self._make_room(min(_CHUNK * self.window, self.max_nodes // 4))
            if st.epoch != self._epoch:
                # prune halved the counts on the open paths: a full count below them would
                # let a child outgrow its parent, so those windows end here
                st.cursors = [-1] * len(st.cursors)
                st.epoch = self._epoch
            kids, out, tok_of = self._kids, self._out, self._tok
            cursors = st.cursors
            for t in toks[start:start + _CHUNK]:
                cursors.append(SUPER_ROOT)          # the window anchored at t
                for j, node in enumerate(cursors):
                    if node < 0:
                        continue
                    k = kids[node]
                    if k is None:
                        child = -1
                    elif k.__class__ is int:
                        child = k if tok_of[k] == t else -1
                    else:
                        child = k.get(t, -1)
                    if child < 0:
                        child = self._alloc(node, t)
                        if child < 0:
                            cursors[j] = -1
                            continue
                    out[child] += 1
                    cursors[j] = child
                if len(cursors) > keep:             # the oldest window is now `window` long
                    del cursors[0]

    def close(self, stream: Hashable) -> None:
        """End a stream. Nothing to flush: append stores every window as it grows."""
        if self.journal is not None:
            self.journal.append((stream, None))
        self._streams.pop(stream, None)

    # ---------------------------------------------------------------- release and prune
    def release(self, key: Hashable) -> None:
        """Drop a request's prompt counts; nodes no one counts any more are freed."""
        self._prompt_kids.pop(key, None)
        pc = self._prompts.pop(key, None)
        if not pc:
            return
        self._pinned_full = False
        pin, out, kids, parent = self._pin, self._out, self._kids, self._parent
        dead = []
        for node in pc:
            pin[node] -= 1
            if pin[node] == 0:
                self._n_pinned -= 1
                if out[node] == 0:
                    dead.append(node)
        for node in dead:               # whole subtrees (module invariants)
            self._unlink(node)
            kids[node] = None
            parent[node] = _FREE
        self._free += dead

    def prune(self, target: int | None = None) -> int:
        """Decay output counts (halve, rounding up) and free the least counted, deepest nodes
        until at most `target` nodes remain (default 3/4 of max_nodes). Nodes on the prompt of
        a live request are never freed, so fewer may be freed than asked. Returns the number freed."""
        if target is None:
            target = int(self.max_nodes * _LOW_WATER)
        out = (np.array(self._out, dtype=np.int64) + 1) >> 1
        excess = self.n_nodes - target
        freed = 0
        if excess > 0:
            parent = np.frombuffer(self._parent, dtype=np.int32).copy()
            depth = np.frombuffer(self._depth, dtype=np.uint8).astype(np.int64)
            cand = np.flatnonzero((np.array(self._pin) == 0) & (parent != _FREE))
            cand = cand[cand != SUPER_ROOT]
            # a child's key is below its parent's (count no higher, one deeper), so the `excess`
            # smallest keys are whole subtrees, ties at the cut included (ties share a depth)
            order = out[cand] * 256 + (255 - depth[cand])
            if excess < len(cand):
                cand = cand[np.argpartition(order, excess - 1)[:excess]]
            victim = np.zeros(len(out), dtype=bool)
            victim[cand] = True
            for node in cand[~victim[parent[cand]]].tolist():     # subtree roots
                self._unlink(node)
            kids = self._kids
            victims = cand.tolist()
            for node in victims:
                kids[node] = None
            parent[cand] = _FREE
            out[cand] = 0
            self._parent = array("i", parent.tobytes())
            self._free += victims
            freed = len(victims)
        self._out = out.tolist()
        self._epoch += 1
        self._top.clear()
        return freed

    def check_invariants(self) -> None:
        """Assert the module invariants (O(nodes); for tests and debugging)."""
        free = set(self._free)
        assert len(free) == len(self._free), "a node id is free twice"
        for n in range(1, len(self._tok)):
            p = self._parent[n]
            if n in free:
                assert p == _FREE and self._kids[n] is None and self._out[n] == self._pin[n] == 0, n
                continue
            assert p != _FREE and self._child(p, self._tok[n]) == n, f"node {n} unlinked"
            assert self._depth[n] == self._depth[p] + 1 <= self.window, f"node {n} depth"
            assert self._out[n] > 0 or self._pin[n] > 0, f"node {n} has no count"
            assert p == SUPER_ROOT or (self._out[n] <= self._out[p] and self._pin[n] <= self._pin[p]), \
                f"node {n} counts more than its parent"
            k = self._kids[n]
            assert not isinstance(k, dict) or len(k) >= 2, f"node {n}: a lone child in a dict"
        pins = Counter(n for pc in self._prompts.values() for n in pc)
        assert all(self._pin[n] == c for n, c in pins.items()), "pin counts drifted"
        assert sum(self._pin) == sum(pins.values()), "pin counts drifted"
        assert self._n_pinned == sum(1 for c in self._pin if c > 0), "pinned node count drifted"

    # ---------------------------------------------------------------- retrieval
    def lookup(self, path: Sequence[int], key: Hashable = OUTPUT) -> int:
        """The node at the end of `path` (from the super-root) if `key` can see it, else -1."""
        pc = self._prompts.get(key, {})
        node = SUPER_ROOT
        for t in path:
            node = self._child(node, t)
            if node < 0 or (self._out[node] <= 0 and node not in pc):
                return -1
        return node
