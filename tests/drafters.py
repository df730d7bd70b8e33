"""Drafters for testing the shared verifier: they implement the Proposer protocol."""
from __future__ import annotations

import random

from paraspec.decoding.proposer import Proposal
from paraspec.decoding.tree import DraftTree


class RandomTreeDrafter:
    """Random draft trees: exercises rejection at every depth."""
    name = "random"

    def __init__(self, vocab: int, nodes: int = 12, seed: int = 0, tokens: list[int] | None = None):
        self.rng = random.Random(seed)
        self.vocab, self.nodes, self.tokens = vocab, nodes, tokens

    def begin(self, request_id, prompt, seed=None):
        pass

    def propose(self, request_id, context, max_nodes):
        tree = DraftTree()
        pick = (lambda: self.rng.choice(self.tokens)) if self.tokens else (lambda: self.rng.randrange(self.vocab))
        for i in range(min(self.nodes, max_nodes)):
            tree.add(pick(), self.rng.randrange(-1, i))
        return Proposal(tree)

    def observe(self, request_id, committed, lookahead_argmax=None):
        pass

    def end(self, request_id):
        pass


class OracleDrafter(RandomTreeDrafter):
    """Knows the reference output (prompt + continuation): proposes its next tokens as one branch of
    a tree with random siblings, so whole runs get accepted."""
    name = "oracle"

    def __init__(self, reference: list[int], vocab: int, depth: int = 6, seed: int = 0, wrong_at: int | None = None):
        super().__init__(vocab, seed=seed)
        self.reference, self.depth, self.wrong_at = reference, depth, wrong_at

    def propose(self, request_id, context, max_nodes):
        n = len(context)
        true = self.reference[n:n + self.depth]
        if self.wrong_at is not None and len(true) > self.wrong_at:
            true = true[: self.wrong_at] + [(true[self.wrong_at] + 1) % self.vocab]
        tree = DraftTree()
        parent = -1
        for t in true:
            tree.add(self.rng.randrange(self.vocab), parent)   # a sibling decoy before the true node
            parent = tree.add(t, parent)
        return Proposal(tree.truncated(max_nodes))
