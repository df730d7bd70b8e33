"""The drafter interface. Drafters see tokens only: no model, no KV cache, no logits (one
exception: a drafter with a true `wants_features` is also handed, after the prefill and after each
verified step, the last hidden state of the row that chose the last committed token,
`observe_feature(request_id, feature, token)`: the hybrid's draft head,
decoding/drafters/draft_head.py).

Per request the engine calls `begin` once with the prompt, then each step `propose` (a draft
tree of at most `max_nodes` nodes hanging below the root, the last committed token) and, after
verification, `observe` with the tokens just committed. `end` releases the request's state.
`begin` and `propose` get a `StepContext`: what the engine knows that a drafter may weigh its
draft against (the batch size, the measured forward-cost curve, the step number). `begin` also
gets the request's answer identity (SamplingParams.answer_identity): what besides the prompt
decides its tokens, so that a memory replays an earlier answer only to a request that will write
it again (None: its answer is a draw). A drafter
holds nothing of the engine's; what drafters share across requests (the token trie, arm
statistics) they are given when built (decoding/drafters/registry.py).

Lookahead decoding also runs a Jacobi window in the same forward. That branch is not a draft:
it is described by `LookaheadBranch` (tokens, offsets from the root position, a mask among its
own tokens); the verifier appends it to the query, invisible to the draft tree, and hands the
argmax of each of its rows back through `observe(..., lookahead_argmax=...)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from ..policy.cost import CostModel
from .tree import DraftTree

if TYPE_CHECKING:
    from ..memory.trie import TokenTrie


@dataclass(frozen=True)
class StepContext:
    """The engine's side of a decode step, as drafters see it."""

    batch_size: int = 1  # sequences verified in this step's forward
    cost: CostModel = field(default_factory=CostModel)  # t(k)/t(1): probed, refreshed by the engine
    step: int = 0  # decode steps the engine has run


DEFAULT_CONTEXT = StepContext()  # one sequence, the default cost curve (tests, replay)


@dataclass
class LookaheadBranch:
    tokens: list[int]
    offsets: list[int]  # position of each token minus the root's position (>= 1)
    mask: np.ndarray  # [n, n] bool among branch tokens; every row also sees the root
    # branch rows whose argmax the drafter needs
    output_rows: list[int] = field(default_factory=list)


@dataclass
class Proposal:
    draft: DraftTree
    lookahead: LookaheadBranch | None = None
    expected: float = 0.0  # the drafter's own estimate of draft tokens to be accepted
    reason: str | None = (
        None  # an empty draft's why (stats.NO_MATCH, ROWS_TOO_DEAR); None: not said
    )


class Proposer(Protocol):
    name: str
    trie: "TokenTrie | None"  # memory drafters' trie (saved / loaded by the API), else None

    def begin(
        self,
        request_id: str,
        prompt: Sequence[int],
        seed: int | None = None,
        ctx: StepContext = DEFAULT_CONTEXT,
        identity: bytes | None = b"",
    ) -> None: ...

    def propose(
        self,
        request_id: str,
        context: Sequence[int],
        max_nodes: int,
        ctx: StepContext = DEFAULT_CONTEXT,
    ) -> Proposal: ...

    def observe(
        self,
        request_id: str,
        committed: Sequence[int],
        lookahead_argmax: Sequence[int] | None = None,
    ) -> None: ...

    def end(self, request_id: str) -> None: ...
