"""The token trie's node store: nodes, their children and counts, the node budget, release and prune.

Counts live on nodes and come in two kinds:
  * output counts (key OUTPUT): shared by every request and persistent: the cross-request memory;
  * prompt counts (key = a unique request id): seen only by that request, dropped by release().

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
from typing import Hashable, Iterable, Sequence

import numpy as np

SUPER_ROOT = 0
_LOW_WATER = 0.75  # prune() shrinks to this fraction of max_nodes: amortises its O(n) cost
_FREE = -2  # parent of a freed node id


class _OutputKey:
    def __repr__(self) -> str:
        return "OUTPUT"


OUTPUT = _OutputKey()  # the key of the shared output memory (never a request id)


class TrieNodes:
    """At most max_nodes nodes below the super-root, none deeper than `window`."""

    def __init__(self, max_nodes: int, window: int) -> None:
        self.max_nodes = max_nodes
        self.window = window
        self.tok = array("i", [-1])
        self.parent = array("i", [-1])
        self.depth = array("B", [0])
        self.kids: list[None | int | dict[int, int]] = [None]
        self.out: list[int] = [0]
        self.pin: list[int] = [0]
        self.free: list[int] = []
        self.prompts: dict[Hashable, dict[int, int]] = {}  # request -> node -> prompt count
        self.n_pinned = 0  # nodes with pin > 0
        self.pinned_full = False  # the last automatic prune could not reach its target
        self.epoch = 0  # bumped by prune: whatever holds node ids or counts re-checks

    @property
    def n_nodes(self) -> int:
        return len(self.tok) - 1 - len(self.free)

    def child(self, node: int, tok: int) -> int:
        k = self.kids[node]
        if k is None:
            return -1
        if k.__class__ is int:
            return k if self.tok[k] == tok else -1
        return k.get(tok, -1)

    def items(self, node: int) -> Iterable[tuple[int, int]]:
        """(token, child) pairs of a node."""
        k = self.kids[node]
        if k is None:
            return ()
        if k.__class__ is int:
            return ((self.tok[k], k),)
        return k.items()

    def lookup(self, path: Sequence[int], key: Hashable = OUTPUT) -> int:
        """The node at the end of `path` (from the super-root) if `key` can see it, else -1."""
        pc = self.prompts.get(key, {})
        out = self.out
        node = SUPER_ROOT
        for t in path:
            node = self.child(node, t)
            if node < 0 or (out[node] <= 0 and node not in pc):
                return -1
        return node

    # ---------------------------------------------------------------- allocation
    def _link(self, parent: int, tok: int, node: int) -> None:
        k = self.kids[parent]
        if k is None:
            self.kids[parent] = node
        elif k.__class__ is int:
            self.kids[parent] = {self.tok[k]: k, tok: node}
        else:
            k[tok] = node

    def _unlink(self, node: int) -> None:
        parent = self.parent[node]
        k = self.kids[parent]
        if k.__class__ is int:
            self.kids[parent] = None
        elif k is not None:
            del k[self.tok[node]]
            if len(k) == 1:
                self.kids[parent] = next(iter(k.values()))

    def alloc(self, parent: int, tok: int) -> int:
        """A new child of `parent` with no counts, or -1 when the node budget is spent."""
        depth = self.depth[parent] + 1
        if self.free:
            node = self.free.pop()
            self.tok[node], self.parent[node], self.depth[node] = tok, parent, depth
        elif len(self.tok) <= self.max_nodes:
            node = len(self.tok)
            self.tok.append(tok)
            self.parent.append(parent)
            self.depth.append(depth)
            self.kids.append(None)
            self.out.append(0)
            self.pin.append(0)
        else:
            return -1
        self._link(parent, tok, node)
        return node

    def new_chain(self, parent: int, toks: list[int], limit: int) -> list[int]:
        """Allocate toks as a chain below `parent`, at most `limit` nodes and as far as the
        budget allows: the bulk path of insertion (below a new node everything is new)."""
        r = min(len(toks), self.max_nodes - self.n_nodes, limit)
        if r <= 0:
            return []
        reuse = min(r, len(self.free))
        ids = [self.free.pop() for _ in range(reuse)]
        base = len(self.tok)
        ids += range(base, base + r - reuse)
        toks = toks[:r]
        parents = [parent] + ids[:-1]
        links: list[int | None] = ids[1:] + [None]
        d0 = self.depth[parent] + 1
        for i in range(reuse):
            node = ids[i]
            self.tok[node], self.parent[node], self.depth[node] = toks[i], parents[i], d0 + i
            self.kids[node] = links[i]
        if reuse < r:
            self.tok.extend(toks[reuse:])
            self.parent.extend(parents[reuse:])
            self.depth.extend(range(d0 + reuse, d0 + r))
            self.kids.extend(links[reuse:])
            self.out.extend([0] * (r - reuse))
            self.pin.extend([0] * (r - reuse))
        self._link(parent, toks[0], ids[0])
        return ids

    def make_room(self, need: int) -> None:
        # when live prompts pin the budget, pruning again frees nothing (and decays every
        # count): new windows are cut short instead until release() unpins nodes
        if self.n_nodes + need > self.max_nodes and not self.pinned_full:
            target = max(0, min(int(self.max_nodes * _LOW_WATER), self.max_nodes - need))
            self.prune(target)
            self.pinned_full = self.n_nodes > target

    # ---------------------------------------------------------------- counts
    def add_counts(self, visited: list[int], key: Hashable) -> None:
        """Count each visit of a node: to the output memory, or to request `key`'s prompt."""
        counts = Counter(visited)
        if key is OUTPUT:
            out = self.out
            for node, c in counts.items():
                out[node] += c
            return
        pin = self.pin
        pc = self.prompts.setdefault(key, {})
        for node, c in counts.items():
            if node in pc:
                pc[node] += c
            else:
                pc[node] = c
                pin[node] += 1
                self.n_pinned += pin[node] == 1

    def release(self, key: Hashable) -> None:
        """Drop a request's prompt counts; nodes no one counts any more are freed."""
        pc = self.prompts.pop(key, None)
        if not pc:
            return
        self.pinned_full = False
        pin, out, kids, parent = self.pin, self.out, self.kids, self.parent
        dead = []
        for node in pc:
            pin[node] -= 1
            if pin[node] == 0:
                self.n_pinned -= 1
                if out[node] == 0:
                    dead.append(node)
        for node in dead:  # whole subtrees (module invariants)
            self._unlink(node)
            kids[node] = None
            parent[node] = _FREE
        self.free += dead

    def prune(self, target: int | None = None) -> int:
        """Decay output counts (halve, rounding up) and free the least counted, deepest nodes
        until at most `target` nodes remain (default 3/4 of max_nodes). Nodes on the prompt of
        a live request are never freed, so fewer may be freed than asked. Returns the number freed."""
        if target is None:
            target = int(self.max_nodes * _LOW_WATER)
        out = (np.array(self.out, dtype=np.int64) + 1) >> 1
        excess = self.n_nodes - target
        freed = 0
        if excess > 0:
            parent = np.frombuffer(self.parent, dtype=np.int32).copy()
            depth = np.frombuffer(self.depth, dtype=np.uint8).astype(np.int64)
            cand = np.flatnonzero((np.array(self.pin) == 0) & (parent != _FREE))
            cand = cand[cand != SUPER_ROOT]
            # a child's key is below its parent's (count no higher, one deeper), so the `excess`
            # smallest keys are whole subtrees, ties at the cut included (ties share a depth)
            order = out[cand] * 256 + (255 - depth[cand])
            if excess < len(cand):
                cand = cand[np.argpartition(order, excess - 1)[:excess]]
            victim = np.zeros(len(out), dtype=bool)
            victim[cand] = True
            for node in cand[~victim[parent[cand]]].tolist():  # subtree roots
                self._unlink(node)
            kids = self.kids
            victims = cand.tolist()
            for node in victims:
                kids[node] = None
            parent[cand] = _FREE
            out[cand] = 0
            self.parent = array("i", parent.tobytes())
            self.free += victims
            freed = len(victims)
        self.out = out.tolist()
        self.epoch += 1
        return freed

    def check_invariants(self) -> None:
        """Assert the module invariants (O(nodes); for tests and debugging)."""
        free = set(self.free)
        assert len(free) == len(self.free), "a node id is free twice"
        for n in range(1, len(self.tok)):
            p = self.parent[n]
            if n in free:
                assert p == _FREE and self.kids[n] is None and self.out[n] == self.pin[n] == 0, n
                continue
            assert p != _FREE and self.child(p, self.tok[n]) == n, f"node {n} unlinked"
            assert self.depth[n] == self.depth[p] + 1 <= self.window, f"node {n} depth"
            assert self.out[n] > 0 or self.pin[n] > 0, f"node {n} has no count"
            assert p == SUPER_ROOT or (self.out[n] <= self.out[p] and self.pin[n] <= self.pin[p]), (
                f"node {n} counts more than its parent"
            )
            k = self.kids[n]
            assert not isinstance(k, dict) or len(k) >= 2, f"node {n}: a lone child in a dict"
        pins = Counter(n for pc in self.prompts.values() for n in pc)
        assert all(self.pin[n] == c for n, c in pins.items()), "pin counts drifted"
        assert sum(self.pin) == sum(pins.values()), "pin counts drifted"
        assert self.n_pinned == sum(1 for c in self.pin if c > 0), "pinned node count drifted"
