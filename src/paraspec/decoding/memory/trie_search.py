"""Drafting from the token trie: the best-first search below a match that builds a DraftTree whose
nodes carry their estimated chance of being accepted (TokenTrie.match finds the matches).

A node scores prompt_weight * prompt count + output count; its probability is its parent's times
its share of the parent's score (plus SMOOTHING at the match), never above its parent's.
"""

from __future__ import annotations

import heapq
from typing import Hashable, Iterable

from ..contract.tree import DraftTree
from .trie_nodes import TrieNodes

SMOOTHING = 1.0  # pseudo-count at the match: a continuation seen once is not certain
BIG_FANOUT = 48  # above this many children, rank only cached candidates (see _ranked)
TOP_K = 16  # candidates kept per big node by output count (>= the largest draft)


class TrieSearch:
    """The searches over one node store, and the candidates of its big nodes they keep."""

    def __init__(self, nodes: TrieNodes) -> None:
        self.nodes = nodes
        self._top: dict[int, tuple[int, list[tuple[int, int]]]] = {}  # see _ranked
        self._top_epoch = nodes.epoch
        self._prompt_kids: dict[Hashable, dict[int, list[tuple[int, int]]]] = {}

    @property
    def prompt_requests(self) -> int:
        """Requests whose prompt children are indexed."""
        return len(self._prompt_kids)

    def forget(self, key: Hashable) -> None:
        """A request's prompt changed or ended: its prompt children are found again."""
        self._prompt_kids.pop(key, None)

    def chain(
        self,
        node: int,
        prior: float,
        key: Hashable,
        pc: dict[int, int],
        max_nodes: int,
        w: float,
        depth_cap: int,
    ) -> DraftTree:
        """The best child at each level below `node` (MindIE)."""
        self._check_epoch()
        chain = DraftTree()
        p, denom = prior, w * pc.get(node, 0) + self.nodes.out[node] + SMOOTHING
        while len(chain.tokens) < min(max_nodes, depth_cap):
            best = self._ranked(node, key, pc, w, 1)
            if not best:
                break
            s, tok, node = best[0]
            p = min(p, p * s / denom)
            chain.parents.append(len(chain.tokens) - 1)
            chain.tokens.append(tok)
            chain.probs.append(p)
            denom = s
        return chain

    def tree(
        self,
        sources: list[tuple[int, float]],
        key: Hashable,
        pc: dict[int, int],
        max_nodes: int,
        w: float,
        depth_cap: int,
        res: DraftTree,
    ) -> None:
        """Best-first growth by probability below every (match, prior) source into `res`; a heap
        entry is a trie node waiting to become a child of draft node `dparent`."""
        self._check_epoch()
        tokens, parents, probs = res.tokens, res.parents, res.probs
        kids, out, tok_of = self.nodes.kids, self.nodes.out, self.nodes.tok
        ranked = self._ranked
        index: dict[tuple[int, int], int] = {}  # (draft parent, token) -> draft node
        heap: list[tuple[float, int, int, int, int, int, float]] = []
        seq = 0

        def push(node: int, p_node: float, denom: float, dparent: int, depth: int) -> None:
            nonlocal seq
            if depth > depth_cap:
                return
            scale = p_node / denom
            for s, t, c in ranked(node, key, pc, w, max_nodes - len(tokens)):
                seq += 1
                p = scale * s
                heapq.heappush(heap, (-(p if p < p_node else p_node), seq, c, t, dparent, depth, s))

        def add(dparent: int, tok: int, p: float) -> int:
            at = index.get((dparent, tok))
            if at is None:  # else the other source drafted it already
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
                p_c = p * s_c / s
                p_c = p_c if p_c < p else p
                if s_c <= 0 or (heap and p_c < -heap[0][0]):
                    break
                node, s, p, depth = c, s_c, p_c, depth + 1
                at = add(at, tok_of[c], p)
            push(node, p, s, at, depth + 1)

    def _check_epoch(self) -> None:
        # a prune halved the counts and freed ids: the cached candidates are stale
        if self._top_epoch != self.nodes.epoch:
            self._top.clear()
            self._top_epoch = self.nodes.epoch

    def _ranked(
        self, node: int, key: Hashable, pc: dict[int, int], w: float, room: int
    ) -> list[tuple[float, int, int]]:
        """(score, token, child) of the best children `key` can see, at most `room` of them;
        on a tie the older child wins (it was inserted first: measured better for chains).

        A big node (anchors of common tokens get thousands of children) is not scanned: its
        candidates are the TOP_K children by output count, cached until the node's own count
        (an upper bound on what its children gained) grows by a quarter, plus this request's
        prompt children, found once per request (a prompt does not change after insert)."""
        nodes = self.nodes
        k = nodes.kids[node]
        out = nodes.out
        if k is None:
            return []
        if k.__class__ is int:
            s = w * pc.get(k, 0) + out[k]
            return [(s, nodes.tok[k], k)] if s > 0 else []
        if len(k) <= BIG_FANOUT:
            cand: Iterable[tuple[int, int]] = k.items()
        else:
            top = self._top.get(node)
            if top is None or out[node] > top[0] * 1.25 + 4:
                best = heapq.nlargest(TOP_K, ((out[c], t, c) for t, c in k.items() if out[c]))
                top = self._top[node] = (out[node], [(t, c) for _, t, c in best])
            cand = [(t, c) for t, c in top[1] if k.get(t) == c]  # ids may have been reused
            if pc:
                mine = self._prompt_kids.setdefault(key, {})
                in_prompt = mine.get(node)
                if in_prompt is None:
                    in_prompt = mine[node] = [(t, c) for t, c in k.items() if c in pc]
                cand = dict(cand + in_prompt).items()
        scored = [(w * pc.get(c, 0) + out[c], t, c) for t, c in cand]
        if len(scored) > room:  # nlargest is stable: the older child wins a tie
            scored = heapq.nlargest(room, scored, key=_score_of)
        return [x for x in scored if x[0] > 0]


def _score_of(entry: tuple[float, int, int]) -> float:
    return entry[0]
