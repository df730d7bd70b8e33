"""Turn a root + Proposal into one forward query (tokens, position ids, mask) and back.

Query rows: [root] + draft tree nodes + lookahead branch tokens (when a drafter runs one).
- draft node i is row i + 1, at position root_pos + depth(i), and sees the root, its
  ancestors and itself;
- lookahead token j is row 1 + n_draft + j, at position root_pos + offset(j), and sees the root
  and the branch tokens its own mask allows;
- the draft tree and the lookahead branch never see each other.
(Every row also sees the whole committed KV cache; model/attention.py's attention_bias adds that.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .proposer import Proposal
from .tree import DraftTree


@dataclass
class Query:
    tokens: list[int]
    positions: list[int]
    mask: torch.Tensor | None  # [q, q] bool; None = a causal chain
    children: list[dict[int, int]]  # per draft row: token -> node (see acceptance.walk)
    n_draft: int  # draft nodes (rows 1..n_draft)
    lookahead_rows: list[int] = field(default_factory=list)  # rows whose argmax the drafter wants
    mask_from: int | None = None  # see transformer.SeqInput (ASPD's branch steps)
    rows: list[int] | None = None  # logits rows, when not the root + drafts + lookahead (ASPD)
    key_order: torch.Tensor | None = None  # see transformer.SeqInput (ASPD's flattened order)

    @property
    def logits_rows(self) -> list[int]:
        """Rows whose logits are needed: the root, every draft node, the lookahead outputs."""
        if self.rows is not None:
            return self.rows
        return list(range(self.n_draft + 1)) + self.lookahead_rows

    def path_rows(self, nodes: list[int]) -> list[int]:
        """The rows of the root and an accepted path's draft nodes: the KV to commit, the logits
        the path's tokens came from."""
        return [0] + [n + 1 for n in nodes]

    def lookahead_argmax(self, argmax: list[int]) -> list[int] | None:
        """From every logits row's argmax, those of the lookahead branch's output rows (they follow
        the root and the draft), for the drafter that ran the branch; None without one."""
        first = self.n_draft + 1
        return argmax[first : first + len(self.lookahead_rows)] if self.lookahead_rows else None


def build_query(root: int, root_pos: int, proposal: Proposal | None) -> Query:
    draft = proposal.draft if proposal is not None else DraftTree()
    la = proposal.lookahead if proposal is not None else None
    n = len(draft)
    tokens = [root] + draft.tokens
    if la is None and draft.is_chain():
        return Query(tokens, list(range(root_pos, root_pos + n + 1)), None, draft.children(), n)

    depths = draft.depths()
    positions = [root_pos] + [root_pos + d for d in depths]
    m = len(la.tokens) if la is not None else 0
    mask = np.zeros((n + 1 + m, n + 1 + m), dtype=bool)
    mask[: n + 1, : n + 1] = draft.ancestor_mask()
    if la is not None:
        tokens += la.tokens
        positions += [root_pos + o for o in la.offsets]
        mask[n + 1 :, 0] = True
        mask[n + 1 :, n + 1 :] = la.mask
    rows = [n + 1 + r for r in la.output_rows] if la is not None else []
    return Query(tokens, positions, torch.from_numpy(mask), draft.children(), n, rows)


def fit_proposal(proposal: Proposal, vocab: int, rows: int, positions: int) -> None:
    """Cut what the model cannot verify, in place: draft tokens outside [0, vocab) with their
    subtrees (a memory loaded from another model's file would fail the whole batch's forward), and
    a lookahead branch that needs more than `rows` query rows or a position offset of `positions`
    or more (near the context's end: the draft's budget bounds the draft's rows, not the branch's).
    A drafter whose branch is cut sees a step without its argmax, as after a step without a window."""
    draft = proposal.draft
    if draft.tokens and not 0 <= min(draft.tokens) <= max(draft.tokens) < vocab:
        proposal.draft = draft.pruned(lambda i: 0 <= draft.tokens[i] < vocab)
    la = proposal.lookahead
    if la is not None and (
        1 + len(proposal.draft) + len(la.tokens) > rows
        or max(la.offsets, default=0) >= positions
        or (la.tokens and not 0 <= min(la.tokens) <= max(la.tokens) < vocab)
    ):
        proposal.lookahead = None
