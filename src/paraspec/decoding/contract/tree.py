"""DraftTree: the one representation of a draft, shared by every drafter and the verifier.

A draft is a tree hanging below the root (the last committed token, whose KV is not cached
yet). Nodes are stored in topological order (a parent before its children); `parents[i]` is
the index of node i's parent, or -1 when the parent is the root. A chain is the special case
parents = [-1, 0, 1, ...]. A drafter may state for every node the chance that it is on the
accepted path (`probs`, empty when it does not say): a node is never likelier than its parent.

Verification flattens `[root] + tokens` into one query: query row 0 is the root, row i + 1 is
node i. Everything the verifier needs (depths, the ancestor mask, children per node) is
derived here once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

ROOT = -1


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)  # per node, or empty: not estimated

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("DraftTree: tokens and parents must have the same length")
        if self.probs and len(self.probs) != len(self.tokens):
            raise ValueError("DraftTree: probs must be empty or one per node")
        for i, p in enumerate(self.parents):
            if not ROOT <= p < i:
                raise ValueError(f"DraftTree: node {i} has parent {p}; parents must come first")

    @classmethod
    def chain(cls, tokens: list[int]) -> "DraftTree":
        return cls(list(tokens), list(range(-1, len(tokens) - 1)))

    @classmethod
    def from_paths(cls, paths: list[list[int]]) -> "DraftTree":
        """Merge token sequences that hang below the root into one tree (shared prefixes merged)."""
        tree = cls()
        index: dict[tuple[int, int], int] = {}  # (parent, token) -> node
        for path in paths:
            parent = ROOT
            for tok in path:
                node = index.get((parent, tok))
                if node is None:
                    node = tree.add(tok, parent)
                    index[(parent, tok)] = node
                parent = node
        return tree

    def extended(self, paths: Sequence[Sequence[int]], max_nodes: int) -> "DraftTree":
        """A copy with the nodes of root-to-node `paths` added where missing, in order, until it
        has `max_nodes` nodes: this tree's nodes keep their indices (and their order)."""
        tree = DraftTree(list(self.tokens), list(self.parents), list(self.probs))
        if len(tree) >= max_nodes:
            return tree
        index = {(p, t): i for i, (t, p) in enumerate(zip(self.tokens, self.parents))}
        for path in paths:
            parent = ROOT
            for tok in path:
                node = index.get((parent, tok))
                if node is None:  # no estimate for an added node: 0 where the others have one
                    node = index[(parent, tok)] = tree.add(tok, parent, 0.0 if self.probs else None)
                    if len(tree) >= max_nodes:
                        return tree
                parent = node
        return tree

    def add(self, token: int, parent: int = ROOT, prob: float | None = None) -> int:
        """Append a node (with its probability where the tree has them); returns its index."""
        if not ROOT <= parent < len(self.tokens):
            raise ValueError(f"DraftTree.add: parent {parent} does not exist")
        if self.tokens and (prob is not None) != bool(self.probs):
            raise ValueError("DraftTree.add: give a probability exactly when the tree has them")
        self.tokens.append(int(token))
        self.parents.append(int(parent))
        if prob is not None:
            self.probs.append(float(prob))
        return len(self.tokens) - 1

    def __len__(self) -> int:
        return len(self.tokens)

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def depths(self) -> list[int]:
        """Depth of each node; children of the root have depth 1."""
        d: list[int] = []
        for p in self.parents:
            d.append(1 if p == ROOT else d[p] + 1)
        return d

    def children(self) -> list[dict[int, int]]:
        """children()[r] maps token -> node index for query row r (row 0 = root, row i+1 = node i).
        The first node added with a token wins if a drafter repeats a (parent, token) pair."""
        out: list[dict[int, int]] = [dict() for _ in range(len(self.tokens) + 1)]
        for i, (tok, p) in enumerate(zip(self.tokens, self.parents)):
            out[p + 1].setdefault(tok, i)
        return out

    def follow(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` a walk from the root down this tree goes through: the draft
        tokens verification accepts when the model's choices are `tokens`."""
        return len(descend(self.children(), 0, tokens))

    def ancestor_mask(self) -> np.ndarray:
        """[n+1, n+1] bool over query rows: row r sees the root, its ancestors and itself."""
        n = len(self.tokens)
        mask = np.zeros((n + 1, n + 1), dtype=bool)
        mask[:, 0] = True
        mask[0, 0] = True
        for i, p in enumerate(self.parents):
            mask[i + 1] = mask[p + 1]
            mask[i + 1, i + 1] = True
        return mask

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to `node`."""
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def truncated(self, max_nodes: int) -> "DraftTree":
        """The first `max_nodes` nodes (still a valid tree: parents come first)."""
        return DraftTree(self.tokens[:max_nodes], self.parents[:max_nodes], self.probs[:max_nodes])

    def pruned(self, keep: Callable[[int], bool]) -> "DraftTree":
        """The nodes `keep` accepts whose parents are kept too, in their order (parents first)."""
        tokens: list[int] = []
        parents: list[int] = []
        kept: list[int] = []
        new: dict[int, int] = {ROOT: ROOT}
        for i, (t, par) in enumerate(zip(self.tokens, self.parents)):
            at = new.get(par)
            if at is not None and keep(i):
                new[i] = len(tokens)
                tokens.append(t)
                parents.append(at)
                kept.append(i)
        probs = self.probs
        return DraftTree(tokens, parents, [probs[i] for i in kept] if probs else [])


def descend(children: list[dict[int, int]], row: int, tokens: Sequence[int]) -> list[int]:
    """The tree walk along tokens: from query row `row` (0 = the root), follow the child that
    carries each next token while there is one; returns the rows reached, one per token followed.
    (children: DraftTree.children(). acceptance.walk is the same walk with tokens drawn as it goes.)"""
    rows = []
    for tok in tokens:
        child = children[row].get(int(tok))
        if child is None:
            break
        row = child + 1
        rows.append(row)
    return rows
