"""Decode modes: a seam for decoding that changes the sequence's own layout (ASPD's branches),
where a drafter, which only proposes tokens for the engine to verify, is not enough.

A request's `drafter` may be a ModePlugin instead of a Proposer. The engine then gives each
sequence the plugin's per-sequence state (`seq.mode`, a SequenceMode) and calls its hooks at
the points where a mode may differ from plain speculative decoding:

  add_request   plugin.new_sequence(tokenizer, params) -> the state (it may refuse the request),
                state.detokenizer() -> how output ids become the user's text;
  first token   state.draw(seq, logits, []);
  each step     state.query(seq, ctx) -> the step's rows when the mode runs the step itself
                (else None: the engine drafts with plugin.drafter and verifies as usual); ctx is
                the step's StepContext as drafters get it (batch size, cost curve), None when no
                sequence of the step has a drafter;
                state.accept(seq, q, logits, forward_s) -> the tokens to emit, for a step it ran;
                in the engine's own steps every token is state.draw(...) and a run of accepted
                tokens ends early after a token where state.ends_run(token);
  stats         state.stats(seq) -> extra figures for sequence.sequence_stats.

The engine names no mode; a mode imports the engine's types, never the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from ...model.tokenizer import Tokenizer
    from ...sampling.params import SamplingParams
    from ...sequence import SequenceState
    from .proposer import Proposer, StepContext
    from .verify import Query


class Detokenizer(Protocol):
    """Output ids -> text deltas (model.tokenizer.IncrementalDetokenizer's interface)."""

    def push(self, new_ids: list[int]) -> str: ...

    def flush(self) -> str: ...


class SequenceMode(Protocol):
    """One sequence's state in a decode mode: the hooks the engine calls (module doc)."""

    def detokenizer(self) -> Detokenizer: ...

    def draw(self, seq: SequenceState, logits: torch.Tensor, pending: list[int]) -> int:
        """The next token of an engine step from this row's logits; `pending` are the tokens the
        step accepted before it (not yet in seq.tokens). The engine records it in the sampler."""
        ...

    def ends_run(self, token: int) -> bool:
        """True when no draft token may be accepted after `token` (the mode changes there)."""
        ...

    def query(self, seq: SequenceState, ctx: StepContext | None) -> Query | None: ...

    def accept(
        self, seq: SequenceState, q: Query, logits: torch.Tensor, forward_s: float
    ) -> list[int]: ...

    def stats(self, seq: SequenceState) -> dict: ...


class ModePlugin:
    """What a plugin builds instead of a drafter when it is a decode mode. `drafter` drafts the
    steps the engine runs itself (None: those steps are autoregressive)."""

    name = "mode"
    drafter: Proposer | None = None

    def new_sequence(self, tokenizer: Tokenizer, params: SamplingParams) -> SequenceMode:
        """The state of one new sequence; raise errors.RequestError to refuse the request."""
        raise NotImplementedError
