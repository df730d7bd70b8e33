"""The rows of one ASPD block step (the steps in decode.py's module doc): their tokens and
positions, the mask over the committed slots from `mask_from` on, the rows whose logits are
drawn, and the key order a `<|/para|>` row takes the block's slots in."""

from __future__ import annotations

import numpy as np
import torch

from ..decoding.contract.tree import DraftTree
from ..decoding.contract.verify import Query
from .block import EMPTY, Block, Span
from .markup import MarkupIds


def block_query(
    b: Block, ids: MarkupIds, length: int, trees: dict[int, DraftTree], closing: bool
) -> Query:
    """This step's rows of block b, the cache holding `length` slots: `<|para|>` on the first
    step, each branch's pending tokens and its draft `trees[k]`, `<|/para|>` when `closing`
    (every branch has drawn its `<|/branch|>`). Sets b.para_pos (first step), b.spans, b.owner."""
    first = b.para_slot < 0
    if first:
        b.para_pos = length
    mask_from = length if first else b.para_slot + 1
    new0 = length - mask_from  # column of the first new row
    # a branch's rows are consecutive: its pending tokens (a causal chain), then its draft
    # nodes; first the rows, then the mask (numpy: a few slice writes per branch, not per row)
    tokens: list[int] = [ids.para] if first else []
    positions: list[int] = [length] if first else []
    owner: list[int] = [-1] if first else []  # per row: its branch, or -1 (<|para|>, <|/para|>)
    b.spans = []
    for k, br in enumerate(b.branches):
        if br.pending:
            r0, tree = len(tokens), trees.get(k, EMPTY)
            start = b.para_pos + 1 + len(br.fed)
            positions += range(start, start + len(br.pending))
            tokens += br.pending
            last = start + len(br.pending) - 1
            # a drafted <|/para|> (the block's last branch) comes after every branch's tokens
            others = sum(len(o.fed) + len(o.pending) for o in b.branches if o is not br)
            positions += [
                last + d + (others if t == ids.end_para else 0)
                for d, t in zip(tree.depths(), tree.tokens)
            ]
            tokens += tree.tokens
            owner += [k] * (len(tokens) - r0)
            b.spans.append(Span(k, r0, r0 + len(br.pending), tree))
    if closing and not first:
        positions.append(b.para_pos + 1 + sum(len(br.fed) for br in b.branches) + len(owner))
        tokens.append(ids.end_para)
        owner.append(-1)
    n = len(tokens)
    mask = np.zeros((n, new0 + n), dtype=bool)
    if first:
        mask[0, new0] = True  # <|para|> sees itself (and the slots before mask_from)
    elif owner and owner[-1] < 0:
        mask[n - 1, : new0 + n] = True  # <|/para|> sees everything before it
    for s in b.spans:
        br, r0, d0, r1 = b.branches[s.k], s.r0, s.d0, s.end
        if br.slots:  # its own committed slots
            mask[r0:r1, np.asarray(br.slots) - mask_from] = True
        if d0 - r0 == 1:  # its pending rows, causal (one row: itself)
            mask[r0, new0 + r0] = True
        else:
            mask[r0:d0, new0 + r0 : new0 + d0] = np.tri(d0 - r0, dtype=bool)
        if r1 > d0:  # drafts: every pending row, their ancestors, themselves
            mask[d0:r1, new0 + r0 : new0 + d0] = True
            mask[d0:r1, new0 + d0 : new0 + r1] = s.tree.ancestor_mask()[1:, 1:]
        if first:
            mask[r0:r1, new0] = True  # the <|para|> row
    for s in b.spans:  # a drafted <|/para|> (every other branch closed) sees every slot too
        for i, t in enumerate(s.tree.tokens):
            if t == ids.end_para:
                mask[s.d0 + i, :new0] = True
    b.owner = owner
    # logits: each branch's last pending row unless it is <|/branch|>, its drafts, and <|/para|>'s
    rows = [
        r
        for s in b.spans
        for r in ([] if tokens[s.d0 - 1] == ids.end_branch else [s.d0 - 1])
        + list(range(s.d0, s.end))
    ]
    if tokens and tokens[-1] == ids.end_para and owner[-1] < 0:
        rows.append(n - 1)
    return Query(
        tokens,
        positions,
        torch.from_numpy(mask),
        [{}],
        0,
        mask_from=mask_from,
        rows=rows,
        key_order=flat_order(b, owner, tokens, positions, new0, ids.end_para)
        if ids.end_para in tokens
        else None,
    )


def flat_order(
    b: Block, owner: list[int], tokens: list[int], positions: list[int], new0: int, end_para: int
) -> torch.Tensor:
    """Each mask column's rank in the flattened order (branch 1's tokens, branch 2's, ...,
    `<|/para|>`), in which a `<|/para|>` row must take the block's interleaved slots (the csrc
    attention's fp32 sums depend on the order: SeqInput.key_order)."""
    big = 1 << 32  # branch k's token at position p ranks (k + 1) * big + p - para_pos
    rank = np.zeros(new0 + len(tokens), dtype=np.int64)
    for k, br in enumerate(b.branches):
        rank[np.asarray(br.slots, dtype=np.int64) - (b.para_slot + 1)] = (
            (k + 1) * big + 1 + np.arange(len(br.slots))
        )
    for r, (k, t, p) in enumerate(zip(owner, tokens, positions)):
        rank[new0 + r] = np.iinfo(np.int64).max if t == end_para else (k + 1) * big + p - b.para_pos
    return torch.from_numpy(rank)
