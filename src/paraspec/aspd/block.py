"""The state of one ASPD block (decode.py): its branches, the rows of its last query, and what
its branch drafts keep (branch_drafts.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..decoding.contract.tree import DraftTree
from ..model.kv_cache import KVCache
from .context_match import ContextIndex


@dataclass
class Branch:
    title: list[int]
    fed: list[int] = field(default_factory=list)       # tokens in the cache, in order
    slots: list[int] = field(default_factory=list)     # their KV slots
    pending: list[int] = field(default_factory=list)   # drawn / forced, fed by the next forward
    content: int = 0                                   # tokens drawn by the model
    closed: bool = False                               # its <|/branch|> is in the cache
    prefix: int = 0                                    # tokens of its forced prefix


EMPTY = DraftTree()


@dataclass
class Span:
    """A branch's rows in the last query: pending tokens r0..d0, then its draft's nodes d0..end."""
    k: int
    r0: int
    d0: int
    tree: DraftTree

    @property
    def end(self) -> int:
        return self.d0 + len(self.tree)


@dataclass
class Block:
    branches: list[Branch]
    para_pos: int = -1
    para_slot: int = -1       # -1 until the first step has fed <|para|>
    owner: list[int] = field(default_factory=list)     # the last query's rows: branch, or -1
    spans: list[Span] = field(default_factory=list)    # the last query's branch rows
    checked: int = 0          # steps of a draft-free decode the token budget was checked for
    # branch drafts (set on the block's first drafting step): the draft policy's stream of each
    # branch, the prefix's match index, each branch's anchored continuations (branch_drafts.py)
    stream: tuple = ()
    keys: list | None = None
    index: ContextIndex | None = None
    anchors: list[list[list[int]]] = field(default_factory=list)


def flat_order(b: Block, owner: list[int], tokens: list[int], positions: list[int], new0: int,
               end_para: int) -> torch.Tensor:
    """Each mask column's rank in the flattened order (branch 1's tokens, branch 2's, ...,
    `<|/para|>`), in which a `<|/para|>` row must take the block's interleaved slots (the csrc
    attention's fp32 sums depend on the order: SeqInput.key_order)."""
    big = 1 << 32     # branch k's token at position p ranks (k + 1) * big + p - para_pos
    rank = np.zeros(new0 + len(tokens), dtype=np.int64)
    for k, br in enumerate(b.branches):
        rank[np.asarray(br.slots, dtype=np.int64) - (b.para_slot + 1)] = (k + 1) * big + 1 + np.arange(len(br.slots))
    for r, (k, t, p) in enumerate(zip(owner, tokens, positions)):
        rank[new0 + r] = np.iinfo(np.int64).max if t == end_para else (k + 1) * big + p - b.para_pos
    return torch.from_numpy(rank)


def flatten_slots(b: Block, cache: KVCache, slots: list[int]) -> list[int]:
    """Move a closed block's KV (`slots`: its tokens' slots in flattened order) into that order,
    in which every later row must take it. Returns the block's slots."""
    lo = b.para_slot + 1
    assert sorted(slots) == list(range(lo, cache.length)), "a closed block holds the slots after <|para|>"
    if slots != list(range(lo, cache.length)):
        cache.k[:, :, lo:cache.length] = cache.k[:, :, slots]
        cache.v[:, :, lo:cache.length] = cache.v[:, :, slots]
    return list(range(lo, cache.length))
