"""Same-Seq positions and the branch-isolation mask of a flattened ASPD sequence.

The rules (aspd.md §2.2-2.4, the training layout, which the engine reproduces exactly):
- `<|para|>` is an ordinary serial token at position p;
- branch k's j-th token (j = 0: its `<|branch|>`) has position p + 1 + j, for every k;
- `<|/para|>` and the serial tokens after it have their flattened index as position;
- a branch token sees everything up to and including `<|para|>` (earlier blocks too), its own
  branch's earlier tokens and itself, never a sibling; serial tokens see every earlier token.

The flattened order is branch 1's tokens, then branch 2's, ...; at inference the KV slots are
interleaved by step instead (keys carry their own positions); the rows that see several branches
take them in the flattened order, and a closed block's KV is moved into it (aspd/decode.py).
"""

from __future__ import annotations

import torch

from .markup import MarkupIds


def layout(
    token_ids: list[int], ids: MarkupIds, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions [n] long, visible [n, n] bool: visible[i, j] = row i attends to token j) of a
    flattened sequence whose first token sits at position `start`. A sequence cut inside a block
    (a truncated answer) gets the rules as far as it goes."""
    n = len(token_ids)
    positions = torch.arange(start, start + n)
    visible = torch.ones(n, n, dtype=torch.bool).tril_()
    para = -1  # index of the open block's <|para|>, -1 outside blocks
    branch_start = -1  # index of the open branch's <|branch|>, -1 outside branches
    for i, t in enumerate(token_ids):
        if para >= 0 and t == ids.end_para:
            para = branch_start = -1
        elif t == ids.para and para < 0:
            para = i
        elif para >= 0:
            if t == ids.branch:
                branch_start = i
            if branch_start < 0:
                raise ValueError(
                    f"token {i} ({t}) of the sequence lies inside a parallel block but "
                    "in no branch; a block holds only <|branch|>...<|/branch|> runs"
                )
            positions[i] = start + para + 1 + (i - branch_start)
            visible[i, para + 1 : branch_start] = False  # earlier siblings
            if t == ids.end_branch:
                branch_start = -1
    return positions, visible
