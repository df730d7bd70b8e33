"""Drafters for testing the shared verifier: they implement the Proposer protocol."""

from __future__ import annotations

import random
from dataclasses import replace

from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.contract.proposer import DEFAULT_CONTEXT, Proposal, StepContext
from paraspec.decoding.contract.tree import DraftTree


class RandomTreeDrafter:
    """Random draft trees: exercises rejection at every depth."""

    name = "random"
    trie = None

    def __init__(self, vocab: int, nodes: int = 12, seed: int = 0, tokens: list[int] | None = None):
        self.rng = random.Random(seed)
        self.vocab, self.nodes, self.tokens = vocab, nodes, tokens

    def begin(self, request_id, prompt, seed=None, ctx=DEFAULT_CONTEXT, identity=b""):
        pass

    def propose(self, request_id, context, max_nodes, ctx=DEFAULT_CONTEXT):
        tree = DraftTree()
        pick = (
            (lambda: self.rng.choice(self.tokens))
            if self.tokens
            else (lambda: self.rng.randrange(self.vocab))
        )
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

    def __init__(
        self,
        reference: list[int],
        vocab: int,
        depth: int = 6,
        seed: int = 0,
        wrong_at: int | None = None,
    ):
        super().__init__(vocab, seed=seed)
        self.reference, self.depth, self.wrong_at = reference, depth, wrong_at

    def propose(self, request_id, context, max_nodes, ctx=DEFAULT_CONTEXT):
        n = len(context)
        true = self.reference[n : n + self.depth]
        if self.wrong_at is not None and len(true) > self.wrong_at:
            true = true[: self.wrong_at] + [(true[self.wrong_at] + 1) % self.vocab]
        tree = DraftTree()
        parent = -1
        for t in true:
            tree.add(self.rng.randrange(self.vocab), parent)  # a sibling decoy before the true node
            parent = tree.add(t, parent)
        return Proposal(tree.truncated(max_nodes))


class WithContext:
    """A drafter driven as an engine drives it: every begin/propose gets `ctx` (the forward-cost
    curve, the batch size), which a test sets once (`cost=`, `batch_size=`, set_batch_size())."""

    def __init__(self, drafter, cost: dict[int, float] | None = None, batch_size: int = 1):
        self.drafter = drafter
        self.ctx = StepContext(batch_size, CostModel(cost))

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def __setattr__(self, name, value):
        if name in ("drafter", "ctx"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.drafter, name, value)

    @property
    def cost(self) -> CostModel:
        return self.ctx.cost

    def set_batch_size(self, n: int) -> None:
        self.ctx = replace(self.ctx, batch_size=n)

    def begin(self, request_id, prompt, seed=None, ctx=None, identity=b""):
        return self.drafter.begin(request_id, prompt, seed, ctx or self.ctx, identity)

    def propose(self, request_id, context, max_nodes, ctx=None):
        return self.drafter.propose(request_id, context, max_nodes, ctx or self.ctx)
