"""What one sequence brings to a forward (transformer.forward, the csrc decoder): its KV cache and
the mask among its new tokens. Its own module so that both forwards read it without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .kv_cache import KVCache


@dataclass
class SeqInput:
    """One sequence's share of a forward: its cache and the mask among its new tokens."""

    cache: KVCache
    num_tokens: int
    tree_mask: torch.Tensor | None = None  # [q, q] bool, row i may see column j; None = causal
    # None: the rows see every committed slot and tree_mask covers the new ones. An int: the rows
    # see slots [0, mask_from) and tree_mask [q, length + q - mask_from] covers the slots from
    # mask_from on, committed ones included (ASPD: a branch must not see its siblings' slots)
    mask_from: int | None = None
    # [length + q - start] int64 ranks: the csrc kernel's rows take their masked slots in this
    # order, not the slots' (its fp32 sums depend on it; ASPD); the torch path's fp64 ones do not
    key_order: torch.Tensor | None = None

    @property
    def start(self) -> int:
        """The slots [0, start) every row sees; the mask covers the rest."""
        return self.cache.length if self.mask_from is None else self.mask_from
