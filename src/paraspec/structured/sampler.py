"""ConstrainedSampler: a RequestSampler whose every draw is masked by the sequence's grammar.

The matcher holds the state after the committed output; each draw masks the row's logits to the
tokens the grammar allows there and draws from what is left (greedy: the masked argmax; sampled:
the masked distribution, with the same counter-based uniform), and `append` advances the matcher
by the drawn token. The engine draws and appends once per visited tree node in order, so a
node's mask is its parent's state advanced by its token, in a verify step exactly as in a
one-token step: constrained parallel decoding gives the tokens constrained plain decoding gives.
A plain RequestSampler never reaches this code (`constrained` is a class attribute).
"""

from __future__ import annotations

import numpy as np
import torch

from ..decoding.contract.proposer import Proposal
from ..decoding.contract.tree import DraftTree
from ..sampling.params import SamplingParams
from ..sampling.sampler import RequestSampler
from .forced import constrain_draft
from .grammar import allowed


class ConstrainedSampler(RequestSampler):
    constrained = True

    def __init__(
        self,
        params: SamplingParams,
        prompt: list[int],
        vocab_size: int,
        seed: int | None,
        matcher,
        eos_ids: list[int],
    ):
        super().__init__(params, prompt, vocab_size, seed)
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.eos_ids = eos_ids
        self.stops = frozenset(eos_ids) | frozenset(params.stop_token_ids)
        self.force = params.structured_outputs.forced_drafts
        self.forced_drafted = 0  # draft nodes the grammar forced
        self.forced_accepted = 0  # of those, emitted (all that the walk reached)
        self._walk: tuple[list[dict[int, int]], set[int]] | None = (
            None  # this step's tree, forced nodes
        )
        self._row = 0

    @property
    def argmax_suffices(self) -> bool:
        return False  # every row needs its own mask

    def allowed(self):
        return allowed(self.matcher, self.vocab_size)

    def draw(self, logits: torch.Tensor) -> int:
        ok = self.allowed()
        if not ok.any():  # the grammar is done (or broken): end the output
            return self.eos_ids[0]
        if logits.shape[-1] != ok.shape[0]:
            ok = np.pad(ok, (0, logits.shape[-1] - ok.shape[0]))
        # in numpy: torch's masked_fill over a vocabulary row wakes its thread team, which on a
        # loaded machine costs milliseconds; np.where takes microseconds (docs/design-notes.md)
        x = logits.detach().float().numpy()
        return super().draw(torch.from_numpy(np.where(ok, x, np.float32(-np.inf))))

    def append(self, token: int) -> None:
        super().append(token)
        self.matcher.consume_token(token)
        if self._walk is not None:  # which of this step's nodes the walk went through
            children, forced = self._walk
            node = children[self._row].get(token)
            if node is None:
                self._walk = None  # the model's own token: the step's walk ends
            else:
                self.forced_accepted += node in forced
                self._row = node + 1

    def constrain(self, proposal: Proposal | None, budget: int) -> Proposal | None:
        """The step's proposal cut to the grammar, with its forced tokens (forced.py)."""
        if proposal is None and not self.force:
            return None
        draft = proposal.draft if proposal is not None else None
        tree, forced = constrain_draft(
            draft if draft is not None else DraftTree(),
            self.matcher,
            self.allowed,
            budget,
            self.force,
            self.stops,
        )
        self.forced_drafted += len(forced)
        self._walk, self._row = (tree.children(), forced), 0
        if proposal is None:
            return Proposal(tree)
        proposal.draft = tree
        return proposal

    def stats(self) -> dict:
        return {
            "forced_draft_tokens": self.forced_drafted,
            "accepted_forced_tokens": self.forced_accepted,
        }
