"""Token trie: the memory behind memory_decoding (Ant Group's Lookahead trie, bounded and saveable).

A path super-root -> a -> b -> c ... records "after a came b, then c, ...". Each stored path is a
window of a token stream: at most `window` tokens starting at one position (the first token is the
anchor). Output counts are shared by every request and persist; a request's prompt counts are seen
only by that request and dropped by release().

TokenTrie is what the drafters hold: it stores windows (insert, append) in its node store
(trie_nodes.py: the arrays, the budget, prune) and drafts from it (match; the search below a
match is trie_search.py). Its output counts are saved and merged by memory_file.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence

from ..contract.tree import DraftTree
from .trie_nodes import OUTPUT, SUPER_ROOT, TrieNodes
from .trie_search import TrieSearch

FALLBACK_PRIOR = 0.5  # the 1-token match knows less context than the 2-token one
_CHUNK = 1024  # positions inserted between two budget checks
_PROMPT_SHARE = 0.5  # live prompts may pin at most this fraction of max_nodes


@dataclass
class TrieStats:
    nodes: int  # live nodes, the super-root excluded
    max_nodes: int
    output_nodes: int  # nodes with a shared output count
    active_prompts: int  # requests whose prompt counts are held
    open_streams: int  # requests whose output is being appended
    window: int
    pinned_nodes: int = 0  # nodes a live prompt pins
    prompt_children: int = 0  # requests whose prompt-only children are indexed


class _Stream:
    """Incremental output insertion: one open path per recent position, so a token is searchable
    as soon as it is committed (MindIE and PIA wait for a full window of later tokens)."""

    __slots__ = ("cursors", "epoch")

    def __init__(self, epoch: int) -> None:
        self.cursors: list[int] = []  # node reached by each open path, oldest first; -1 = closed
        self.epoch = epoch


class TokenTrie:
    """The windows of token streams, and the drafts they suggest for a context."""

    def __init__(self, max_nodes: int = 1 << 20, window: int = 18) -> None:
        if max_nodes < 1:
            raise ValueError(f"TokenTrie: max_nodes={max_nodes} must be >= 1")
        if not 2 <= window <= 255:
            raise ValueError(f"TokenTrie: window={window} must be in [2, 255]")
        self.nodes = TrieNodes(max_nodes, window)
        self._search = TrieSearch(self.nodes)
        self._streams: dict[Hashable, _Stream] = {}
        # when a list: every output append / close is recorded here, so a replica can replay
        # its new output counts elsewhere (paraspec.ray_serve's trie sync); None costs nothing
        self.journal: list[tuple[Hashable, list[int] | None]] | None = None

    @property
    def max_nodes(self) -> int:
        return self.nodes.max_nodes

    @property
    def window(self) -> int:
        return self.nodes.window

    @property
    def n_nodes(self) -> int:
        return self.nodes.n_nodes

    def __len__(self) -> int:
        return self.nodes.n_nodes

    def stats(self) -> TrieStats:
        nodes = self.nodes
        return TrieStats(
            nodes.n_nodes,
            self.max_nodes,
            sum(1 for c in nodes.out if c > 0),
            len(nodes.prompts),
            len(self._streams),
            self.window,
            nodes.n_pinned,
            self._search.prompt_requests,
        )

    # ---------------------------------------------------------------- insertion
    def insert(
        self, tokens: Sequence[int], key: Hashable = OUTPUT, window: int | None = None
    ) -> None:
        """Store the window (at most `window` tokens) starting at every position of `tokens`.

        key=OUTPUT adds to the shared output memory; any other key is a request id whose prompt
        counts only that request sees, until release(key). Live prompts together may create at
        most half of max_nodes (later windows are cut short), so that a huge prompt cannot evict
        the whole memory. Callers cut stop tokens out first.
        """
        w = min(window or self.window, self.window)
        toks = [int(t) for t in tokens]
        nodes = self.nodes
        if key is not OUTPUT:
            self._search.forget(key)
        # in chunks: counts are committed before the next chunk may prune (uncounted nodes
        # would be freed), and one huge input cannot ask prune for the whole budget
        for start in range(0, len(toks), _CHUNK):
            limit = self.max_nodes // 4
            if key is not OUTPUT:
                limit = min(limit, int(self.max_nodes * _PROMPT_SHARE) - nodes.n_pinned)
            nodes.make_room(min(_CHUNK * w, max(limit, 0)))
            visited = self._walk_windows(toks, start, min(start + _CHUNK, len(toks)), w, limit)
            nodes.add_counts(visited, key)

    def _walk_windows(
        self, toks: list[int], start: int, stop: int, w: int, limit: int
    ) -> list[int]:
        """Nodes on the windows starting at positions [start, stop); at most `limit` new ones."""
        nodes = self.nodes
        kids, tok_of, new_chain = nodes.kids, nodes.tok, nodes.new_chain
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
                new = new_chain(node, toks[j:end], limit)
                visited += new
                limit -= len(new)
        return visited

    def append(self, stream: Hashable, tokens: Iterable[int]) -> None:
        """Add the tokens a request just committed to the shared output memory: every open
        window of the stream gets the next token, and each token opens a window."""
        nodes = self.nodes
        st = self._streams.get(stream)
        if st is None:
            st = self._streams[stream] = _Stream(nodes.epoch)
        toks = [int(t) for t in tokens]
        if self.journal is not None:
            self.journal.append((stream, toks))
        keep = self.window - 1
        for start in range(0, len(toks), _CHUNK):
            nodes.make_room(min(_CHUNK * self.window, self.max_nodes // 4))
            if st.epoch != nodes.epoch:
                # prune halved the counts on the open paths: a full count below them would
                # let a child outgrow its parent, so those windows end here
                st.cursors = [-1] * len(st.cursors)
                st.epoch = nodes.epoch
            kids, out, tok_of, alloc = nodes.kids, nodes.out, nodes.tok, nodes.alloc
            cursors = st.cursors
            for t in toks[start : start + _CHUNK]:
                cursors.append(SUPER_ROOT)  # the window anchored at t
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
                        child = alloc(node, t)
                        if child < 0:
                            cursors[j] = -1
                            continue
                    out[child] += 1
                    cursors[j] = child
                if len(cursors) > keep:  # the oldest window is now `window` long
                    del cursors[0]

    def close(self, stream: Hashable) -> None:
        """End a stream. Nothing to flush: append stores every window as it grows."""
        if self.journal is not None:
            self.journal.append((stream, None))
        self._streams.pop(stream, None)

    def release(self, key: Hashable) -> None:
        """Drop a request's prompt counts; nodes no one counts any more are freed."""
        self._search.forget(key)
        self.nodes.release(key)

    def prune(self, target: int | None = None) -> int:
        """Decay the output counts and free the least counted nodes down to `target` nodes
        (TrieNodes.prune); returns the number freed."""
        return self.nodes.prune(target)

    def check_invariants(self) -> None:
        """Assert the node store's invariants (O(nodes); for tests and debugging)."""
        self.nodes.check_invariants()

    # ---------------------------------------------------------------- drafting
    def lookup(self, path: Sequence[int], key: Hashable = OUTPUT) -> int:
        """The node at the end of `path` (from the super-root) if `key` can see it, else -1."""
        return self.nodes.lookup(path, key)

    def match(
        self,
        context: Sequence[int],
        key: Hashable = OUTPUT,
        max_nodes: int = 15,
        tree: bool = True,
        prompt_weight: float = 1.0,
        max_depth: int | None = None,
    ) -> DraftTree:
        """Draft continuations of `context` below the root context[-1], parents first.

        Looks up the last 2 tokens and the last token alone: both subtrees compete for the
        budget, the 1-token one discounted by FALLBACK_PRIOR (it knows less context), and a
        continuation found in both is drafted once. A node scores prompt_weight * prompt count
        + output count; its probability is its parent's times its share of the parent's score
        (plus SMOOTHING at the match), never above its parent's.
        tree=True: the max_nodes most probable nodes, best first,
        so every prefix of the result is the best tree of its size. tree=False: one chain, the
        best child at each level (MindIE).
        """
        res = DraftTree()
        if max_nodes <= 0 or not context:
            return res
        depth_cap = max_depth or self.window
        nodes = self.nodes
        pc = nodes.prompts.get(key, {})
        sources = []
        if len(context) >= 2:
            m2 = nodes.lookup(context[-2:], key)
            if m2 >= 0:
                sources.append((m2, 1.0))
        m1 = nodes.lookup(context[-1:], key)
        if m1 >= 0:
            sources.append((m1, FALLBACK_PRIOR))
        if tree:
            self._search.tree(sources, key, pc, max_nodes, prompt_weight, depth_cap, res)
            return res
        for src, prior in sources:
            chain = self._search.chain(src, prior, key, pc, max_nodes, prompt_weight, depth_cap)
            if sum(chain.probs) > sum(res.probs):
                res = chain
        return res
