"""A step's draft tree under a grammar: cut to the nodes the grammar allows, plus the tokens it forces.

Walked depth first with the sequence's own matcher (a node's state is its parent's advanced by the
node's token; rolled back on the way up, so the matcher ends where it started):
- a draft token the grammar forbids at its node is dropped with its subtree (verification could
  never accept it: the masked draw there cannot be that token);
- where the grammar allows exactly one token (a key of a schema, `": `, a closing brace), that
  token is the node's only child, added if the drafter did not propose it: its draw is decided by
  the mask alone, so it is accepted without a model choice, and the model's own choice comes at
  the row after it, in the same forward.
Nothing here decides a token: acceptance still walks the tree with masked draws (sampler.py).
"""

from __future__ import annotations

from typing import Callable, Collection

import numpy as np

from ..decoding.contract.tree import ROOT, DraftTree


def constrain_draft(
    draft: DraftTree,
    matcher,
    allowed: Callable[[], np.ndarray],
    budget: int,
    force: bool,
    stops: Collection[int],
) -> tuple[DraftTree, set[int]]:
    """(the tree, its forced nodes) within `budget` nodes; allowed(): the matcher's next tokens."""
    kids = draft.children()
    probs = draft.probs
    out = DraftTree()
    forced: set[int] = set()

    def visit(row: int | None, parent: int, prob: float) -> None:
        # row: this node's query row in `draft` (0: the root); None: a node the grammar added
        ok = allowed()
        old = kids[row] if row is not None else {}
        only = np.flatnonzero(ok) if force else None
        if only is not None and len(only) == 1:
            nxt = [(int(only[0]), old.get(int(only[0])), True)]
        else:
            nxt = [(t, n, False) for t, n in old.items() if t < len(ok) and ok[t]]
        for tok, node, is_forced in nxt:
            if len(out) >= budget:
                return
            p = probs[node] if probs and node is not None else prob
            new = out.add(tok, parent, p if probs else None)
            if is_forced:
                forced.add(new)
            if tok in stops or not matcher.consume_token(tok):
                continue  # a walk ends at a stop token
            visit(node + 1 if node is not None else None, new, p)
            matcher.rollback(1)

    if budget > 0:
        visit(0, ROOT, 1.0)
    return out, forced
