"""The drafter interface. Drafters see tokens only: no model, no KV cache, no logits.

Per request the engine calls `begin` once with the prompt, then each step `propose` (a draft
tree of at most `max_nodes` nodes hanging below the root, the last committed token) and, after
verification, `observe` with the tokens just committed. `end` releases the request's state.

Lookahead decoding also runs a Jacobi window in the same forward. That branch is not a draft:
it is described by `LookaheadBranch` (tokens, offsets from the root position, a mask among its
own tokens); the verifier appends it to the query, invisible to the draft tree, and hands the
argmax of each of its rows back through `observe(..., lookahead_argmax=...)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from .tree import DraftTree


@dataclass
class LookaheadBranch:
    tokens: list[int]
    offsets: list[int]               # position of each token minus the root's position (>= 1)
    mask: np.ndarray                 # [n, n] bool among branch tokens; every row also sees the root
    output_rows: list[int] = field(default_factory=list)  # branch rows whose argmax the drafter needs


@dataclass
class Proposal:
    draft: DraftTree
    lookahead: LookaheadBranch | None = None
    expected: float = 0.0            # the drafter's own estimate of draft tokens to be accepted


class Proposer(Protocol):
    name: str

    def begin(self, request_id: str, prompt: Sequence[int], seed: int | None = None) -> None: ...

    def propose(self, request_id: str, context: Sequence[int], max_nodes: int) -> Proposal: ...

    def observe(self, request_id: str, committed: Sequence[int],
                lookahead_argmax: Sequence[int] | None = None) -> None: ...

    def end(self, request_id: str) -> None: ...
