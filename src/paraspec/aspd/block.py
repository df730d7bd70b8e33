"""The state of one ASPD block (decode.py): its branches, the rows of its last query
(block_query.py), and what its branch drafts keep (branch_drafts.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..decoding.contract.tree import DraftTree
from ..model.kv_cache import KVCache
from .context_match import ContextIndex


@dataclass
class Branch:
    title: list[int]
    fed: list[int] = field(default_factory=list)  # tokens in the cache, in order
    slots: list[int] = field(default_factory=list)  # their KV slots
    pending: list[int] = field(default_factory=list)  # drawn / forced, fed by the next forward
    content: int = 0  # tokens drawn by the model
    closed: bool = False  # its <|/branch|> is in the cache
    prefix: int = 0  # tokens of its forced prefix


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
    para_slot: int = -1  # -1 until the first step has fed <|para|>
    owner: list[int] = field(default_factory=list)  # the last query's rows: branch, or -1
    spans: list[Span] = field(default_factory=list)  # the last query's branch rows
    checked: int = 0  # steps of a draft-free decode the token budget was checked for
    # branch drafts (set on the block's first drafting step): the draft policy's stream of each
    # branch, the prefix's match index, each branch's anchored continuations (branch_drafts.py)
    stream: tuple = ()
    keys: list | None = None
    index: ContextIndex | None = None
    anchors: list[list[list[int]]] = field(default_factory=list)


def flatten_slots(b: Block, cache: KVCache, slots: list[int]) -> list[int]:
    """Move a closed block's KV (`slots`: its tokens' slots in flattened order) into that order,
    in which every later row must take it. Returns the block's slots."""
    lo = b.para_slot + 1
    assert sorted(slots) == list(range(lo, cache.length)), (
        "a closed block holds the slots after <|para|>"
    )
    if slots != list(range(lo, cache.length)):
        cache.k[:, :, lo : cache.length] = cache.k[:, :, slots]
        cache.v[:, :, lo : cache.length] = cache.v[:, :, slots]
    return list(range(lo, cache.length))
