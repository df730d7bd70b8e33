"""Token trie: the memory behind memory_decoding (Ant Group's Lookahead trie, bounded and saveable).

A path super-root -> a -> b -> c ... records "after a came b, then c, ...". Each stored path is a
window of a token stream: at most `window` tokens starting at one position (the first token is the
anchor). Counts live on nodes and come in two kinds:
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

import heapq
import json
import os
from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

import numpy as np

from ..errors import ParaspecError

SUPER_ROOT = 0
FALLBACK_PRIOR = 0.5        # the 1-token match knows less context than the 2-token one
SMOOTHING = 1.0             # pseudo-count at the match: a continuation seen once is not certain
BIG_FANOUT = 48             # above this many children, rank only cached candidates (see _ranked)
TOP_K = 16                  # candidates kept per big node by output count (>= the largest draft)
_LOW_WATER = 0.75           # prune() shrinks to this fraction of max_nodes: amortises its O(n) cost
_CHUNK = 1024               # positions inserted between two budget checks
_PROMPT_SHARE = 0.5         # live prompts may pin at most this fraction of max_nodes
_FREE = -2                  # parent of a freed node id
_FILE_FORMAT = "paraspec-token-trie"
_FILE_VERSION = 1


class _OutputKey:
    def __repr__(self) -> str:
        return "OUTPUT"


OUTPUT = _OutputKey()       # the key of the shared output memory (never a request id)


class TrieFileError(ParaspecError):
    """A saved trie file is missing, corrupt or from an incompatible version."""


@dataclass
class TrieStats:
    nodes: int              # live nodes, the super-root excluded
    max_nodes: int
    output_nodes: int       # nodes with a shared output count
    active_prompts: int     # requests whose prompt counts are held
    open_streams: int       # requests whose output is being appended
    window: int


@dataclass
class Match:
    """A draft below the root: node i is tokens[i], child of parents[i] (-1 = the root);
    probs[i] estimates the chance that node i is on the accepted path (from the trie counts)."""
    tokens: list[int]
    parents: list[int]
    probs: list[float]

    def __len__(self) -> int:
        return len(self.tokens)


class _Stream:
    """Incremental output insertion: one open path per recent position, so a token is searchable
    as soon as it is committed (MindIE and PIA wait for a full window of later tokens)."""
    __slots__ = ("cursors", "epoch")

    def __init__(self, epoch: int) -> None:
        self.cursors: list[int] = []    # node reached by each open path, oldest first; -1 = closed
        self.epoch = epoch


class TokenTrie:
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
                         len(self._prompts), len(self._streams), self.window)

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

    def match(self, context: Sequence[int], key: Hashable = OUTPUT, max_nodes: int = 15,
              tree: bool = True, prompt_weight: float = 1.0, continuation: float = 1.0,
              max_depth: int | None = None) -> Match:
        """Draft continuations of `context` below the root context[-1], parents first.

        Looks up the last 2 tokens and the last token alone: both subtrees compete for the
        budget, the 1-token one discounted by FALLBACK_PRIOR (it knows less context), and a
        continuation found in both is drafted once. A node scores prompt_weight * prompt count
        + output count; its probability is its parent's times its share of the parent's score
        (plus SMOOTHING at the match), times `continuation` below the first level (a caller's
        correction of the trie's conditional estimates), never above its parent's.
        tree=True: the max_nodes most probable nodes, best first,
        so every prefix of the result is the best tree of its size. tree=False: one chain, the
        best child at each level (MindIE).
        """
        res = Match([], [], [])
        if max_nodes <= 0 or not context:
            return res
        depth_cap = max_depth or self.window
        pc = self._prompts.get(key, {})
        sources = []
        if len(context) >= 2:
            m2 = self.lookup(context[-2:], key)
            if m2 >= 0:
                sources.append((m2, 1.0))
        m1 = self.lookup(context[-1:], key)
        if m1 >= 0:
            sources.append((m1, FALLBACK_PRIOR))
        if tree:
            self._grow_tree(sources, key, pc, max_nodes, prompt_weight, continuation, depth_cap, res)
            return res
        for src, prior in sources:
            chain = self._grow_chain(src, prior, key, pc, max_nodes, prompt_weight, continuation,
                                     depth_cap)
            if sum(chain.probs) > sum(res.probs):
                res = chain
        return res

    def _grow_chain(self, node: int, prior: float, key: Hashable, pc: dict[int, int],
                    max_nodes: int, w: float, kappa: float, depth_cap: int) -> Match:
        chain = Match([], [], [])
        p, denom = prior, w * pc.get(node, 0) + self._out[node] + SMOOTHING
        while len(chain.tokens) < min(max_nodes, depth_cap):
            best = self._ranked(node, key, pc, w, 1)
            if not best:
                break
            s, tok, node = best[0]
            p = min(p, p * s / denom * (kappa if chain.tokens else 1.0))
            chain.parents.append(len(chain.tokens) - 1)
            chain.tokens.append(tok)
            chain.probs.append(p)
            denom = s
        return chain

    def _grow_tree(self, sources: list[tuple[int, float]], key: Hashable, pc: dict[int, int],
                   max_nodes: int, w: float, kappa: float, depth_cap: int, res: Match) -> None:
        """Best-first growth by probability; a heap entry is a trie node waiting to become a
        child of draft node `dparent`."""
        tokens, parents, probs = res.tokens, res.parents, res.probs
        kids, out, tok_of = self._kids, self._out, self._tok
        index: dict[tuple[int, int], int] = {}     # (draft parent, token) -> draft node
        heap: list[tuple[float, int, int, int, int, int, float]] = []
        seq = 0

        def push(node: int, p_node: float, denom: float, dparent: int, depth: int) -> None:
            nonlocal seq
            if depth > depth_cap:
                return
            scale = p_node / denom * (kappa if dparent >= 0 else 1.0)
            for s, t, c in self._ranked(node, key, pc, w, max_nodes - len(tokens)):
                seq += 1
                p = scale * s
                heapq.heappush(heap, (-(p if p < p_node else p_node), seq, c, t, dparent, depth, s))

        def add(dparent: int, tok: int, p: float) -> int:
            at = index.get((dparent, tok))
            if at is None:                  # else the other source drafted it already
                at = len(tokens)
                tokens.append(tok)
                parents.append(dparent)
                probs.append(p)
                index[(dparent, tok)] = at
            return at

        for src, prior in sources:
            push(src, prior, w * pc.get(src, 0) + out[src] + SMOOTHING, -1, 1)
        while heap and len(tokens) < max_nodes:
            neg_p, _, node, tok, dparent, depth, s = heapq.heappop(heap)
            p = -neg_p
            at = add(dparent, tok, p)
            # follow a lone child while it is still the best candidate: copied text is long
            # unary chains, and this spares them the heap
            while len(tokens) < max_nodes and depth < depth_cap:
                c = kids[node]
                if c.__class__ is not int:
                    break
                s_c = w * pc.get(c, 0) + out[c]
                p_c = p * kappa * s_c / s
                p_c = p_c if p_c < p else p
                if s_c <= 0 or (heap and p_c < -heap[0][0]):
                    break
                node, s, p, depth = c, s_c, p_c, depth + 1
                at = add(at, tok_of[c], p)
            push(node, p, s, at, depth + 1)

    def _ranked(self, node: int, key: Hashable, pc: dict[int, int], w: float,
                room: int) -> list[tuple[float, int, int]]:
        """(score, token, child) of the best children `key` can see, at most `room` of them;
        on a tie the older child wins (it was inserted first: measured better for chains).

        A big node (anchors of common tokens get thousands of children) is not scanned: its
        candidates are the TOP_K children by output count, cached until the node's own count
        (an upper bound on what its children gained) grows by a quarter, plus this request's
        prompt children, found once per request (a prompt does not change after insert)."""
        k = self._kids[node]
        out = self._out
        if k is None:
            return []
        if k.__class__ is int:
            s = w * pc.get(k, 0) + out[k]
            return [(s, self._tok[k], k)] if s > 0 else []
        if len(k) <= BIG_FANOUT:
            cand: Iterable[tuple[int, int]] = k.items()
        else:
            top = self._top.get(node)
            if top is None or out[node] > top[0] * 1.25 + 4:
                best = heapq.nlargest(TOP_K, ((out[c], t, c) for t, c in k.items() if out[c]))
                top = self._top[node] = (out[node], [(t, c) for _, t, c in best])
            cand = [(t, c) for t, c in top[1] if k.get(t) == c]    # ids may have been reused
            if pc:
                mine = self._prompt_kids.setdefault(key, {})
                in_prompt = mine.get(node)
                if in_prompt is None:
                    in_prompt = mine[node] = [(t, c) for t, c in k.items() if c in pc]
                cand = dict(cand + in_prompt).items()
        scored = [(w * pc.get(c, 0) + out[c], t, c) for t, c in cand]
        if len(scored) > room:              # nlargest is stable: the older child wins a tie
            scored = heapq.nlargest(room, scored, key=_score_of)
        return [x for x in scored if x[0] > 0]

    # ---------------------------------------------------------------- persistence
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
        meta = json.dumps({"format": _FILE_FORMAT, "version": _FILE_VERSION, "window": self.window})
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "wb") as f:
            np.savez_compressed(f, meta=np.array(meta), parent=parent, token=token, count=count)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, max_nodes: int | None = None) -> "TokenTrie":
        """Read a file written by save(). max_nodes defaults to max(2**20, the file's nodes)."""
        parent, token, count, window = _read_trie_file(path)
        trie = cls(max_nodes or max(1 << 20, len(token)), window)
        trie._add_output_arrays(parent, token, count)
        return trie

    def merge(self, other: "TokenTrie") -> None:
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


def _score_of(entry: tuple[float, int, int]) -> float:
    return entry[0]


def _read_trie_file(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    def fail(why: str) -> TrieFileError:
        return TrieFileError(f"trie file {os.fspath(path)!r} {why}; delete it, or save the "
                             "memory again, to start from a valid file")

    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            parent, token, count = z["parent"], z["token"], z["count"]
    except FileNotFoundError:
        raise TrieFileError(f"trie file {os.fspath(path)!r} does not exist; check the path, "
                            "or save a trie there first") from None
    except Exception as e:  # zip, npz, key and json errors all mean the same to the user
        raise fail(f"cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") != _FILE_FORMAT:
        raise fail("is not a paraspec token trie")
    if meta.get("version") != _FILE_VERSION:
        raise fail(f"has version {meta.get('version')!r}, this paraspec reads version {_FILE_VERSION}")
    window = meta.get("window")
    if not isinstance(window, int) or not 2 <= window <= 255:
        raise fail(f"has an invalid window {window!r}")
    n = len(token)
    if token.ndim != 1 or parent.shape != (n,) or count.shape != (n,):
        raise fail("has arrays of mismatched shapes")
    if not (np.issubdtype(parent.dtype, np.integer) and np.issubdtype(token.dtype, np.integer)
            and np.issubdtype(count.dtype, np.integer)):
        raise fail("has non-integer arrays")
    if n and (np.any(parent < 0) or np.any(parent > np.arange(n)) or np.any(token < 0)
              or np.any(count <= 0)):
        raise fail("has out-of-order parents, negative tokens or non-positive counts")
    return parent, token, count, window
