"""The serial segments' drafter inside ASPD, its drafts cut to what serial mode can accept.

A serial draft comes from the configured drafter (memory_decoding's trie holds past answers
with their markup), which knows nothing of ASPD's modes: below `<|para|>` it drafts the block
that followed it last time, and it may draft markup the serial grammar never draws. No such
node can be accepted (the engine's walk stops after `<|para|>`: AspdState.ends_run; the grammar
bans `<|/para|>`, `<|branch|>` and `<|/branch|>` in serial mode), so they only cost rows: they
are dropped before the step's query is built. Everything else is the inner drafter's.
"""

from __future__ import annotations

from typing import Sequence

from ..decoding.contract.proposer import DEFAULT_CONTEXT, Proposal, StepContext
from ..decoding.contract.tree import ROOT
from .markup import MarkupIds


class SerialDrafts:
    """A Proposer around the serial drafter; `ids` is set by the decoder once it knows the
    tokenizer (before the first propose)."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.trie = getattr(inner, "trie", None)
        self.ids: MarkupIds | None = None

    def begin(
        self,
        request_id: str,
        prompt: Sequence[int],
        seed: int | None = None,
        ctx: StepContext = DEFAULT_CONTEXT,
        identity: bytes | None = b"",
    ) -> None:
        self.inner.begin(request_id, prompt, seed, ctx, identity)

    def propose(
        self,
        request_id: str,
        context: Sequence[int],
        max_nodes: int,
        ctx: StepContext = DEFAULT_CONTEXT,
    ) -> Proposal:
        proposal = self.inner.propose(request_id, context, max_nodes, ctx)
        d, ids = proposal.draft, self.ids
        if d and ids is not None:
            never = {ids.end_para, ids.branch, ids.end_branch}
            proposal.draft = d.pruned(
                lambda i: (
                    d.tokens[i] not in never
                    and (d.parents[i] == ROOT or d.tokens[d.parents[i]] != ids.para)
                )
            )
        return proposal

    def observe(
        self,
        request_id: str,
        committed: Sequence[int],
        lookahead_argmax: Sequence[int] | None = None,
    ) -> None:
        self.inner.observe(request_id, committed, lookahead_argmax)

    def end(self, request_id: str) -> None:
        self.inner.end(request_id)
