"""Exact prefix KV reuse: a request whose prompt starts with chunks the engine has prefilled before
(a system prompt, a conversation's earlier turns) copies their KV instead of computing it again.

Why blocks are whole prefill chunks: the prompt road is not row-invariant (transformer.py: torch's
fastest matmuls and a plain fp32 attention for prompts; the GGUF dense road from a row count on),
so a prompt token's K/V depend on which chunk computed it. Chunks start at multiples of
prefill_chunk (runner.prefill_next), fixed by the prompt alone; a chunk computed over the same
tokens, on top of the same KV, is the same forward with the same bits. So a block is one whole
chunk [i*C, (i+1)*C), keyed by its tokens and its parent block (a chain from the prompt's start,
vLLM's automatic prefix caching with one block per chunk), and a prompt reuses only whole leading
chunks: its remaining chunks then start where a fresh prefill's would, and every bit of its KV and
logits is what prefill without the cache computes, on every kernel path and numerics. The last
token's chunk always runs (its logits give the first token), and decoded tokens are never stored
(their KV came from decode forwards, not from the prompt road).

Bounded: the blocks' bytes stay within a budget, the least recently used block (with the blocks
below it, unreachable without it) evicted first; a chain's blocks are touched leaf first, so a
shared system prompt outlives the turns stored after it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from .config import DEFAULT_PREFIX_CACHE_MB
from .errors import ConfigError
from .model.kv_cache import KVCache

MB = 1 << 20

# (parent block id, -1 at the prompt's start; the chunk's tokens)
_Key = tuple[int, tuple[int, ...]]


@dataclass
class _Block:
    id: int
    key: _Key
    k: torch.Tensor  # [n_layers, n_kv_heads, C, head_dim], the cache's dtype
    v: torch.Tensor
    children: set[_Key] = field(default_factory=set)

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


@dataclass
class PrefixCacheStats:
    lookups: int = 0  # prefills that asked the cache
    hits: int = 0  # ... and started from at least one cached block
    reused_tokens: int = 0  # prompt tokens whose KV was copied, not computed
    stored_blocks: int = 0
    evicted_blocks: int = 0


class PrefixCache:
    def __init__(self, budget_mb: float = DEFAULT_PREFIX_CACHE_MB):
        if (
            isinstance(budget_mb, bool)
            or not isinstance(budget_mb, (int, float))
            or not 0 <= budget_mb <= 1 << 20
        ):
            raise ConfigError(
                f"prefix_cache_mb={budget_mb!r} is invalid; use a number of MB from 0 (off) to "
                f"{1 << 20}",
                param="prefix_cache_mb",
            )
        self.budget_bytes = int(budget_mb * MB)
        self.block_tokens = 0  # the chunk size the blocks were made with
        self._blocks: OrderedDict[_Key, _Block] = OrderedDict()  # least recently used first
        self._by_id: dict[int, _Block] = {}
        self._ids = 0
        self.nbytes = 0
        self.stats = PrefixCacheStats()

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        self._blocks.clear()
        self._by_id.clear()
        self.nbytes = 0

    def _chain(self, prompt: list[int], chunk: int, blocks: int) -> list[_Block]:
        """The cached blocks of the prompt's first `blocks` chunks, from its start until one is missing."""
        if chunk != self.block_tokens:  # another chunk size makes other chunks: none of them fits
            self.clear()
            self.block_tokens = chunk
        chain: list[_Block] = []
        parent = -1
        for i in range(blocks):
            b = self._blocks.get((parent, tuple(prompt[i * chunk : (i + 1) * chunk])))
            if b is None:
                break
            chain.append(b)
            parent = b.id
        return chain

    def _touch(self, chain: list[_Block]) -> None:
        for b in reversed(chain):  # the leaf first: its ancestors are evicted after it
            self._blocks.move_to_end(b.key)

    def restore(self, prompt: list[int], cache: KVCache, chunk: int) -> int:
        """Copy the KV of the prompt's cached leading chunks into an empty cache (all but the
        chunk of the last token); returns the tokens restored (cache.length)."""
        if not self.enabled or cache.length:
            return 0
        chain = self._chain(prompt, chunk, (len(prompt) - 1) // chunk)
        self.stats.lookups += 1
        if not chain:
            return 0
        self.stats.hits += 1
        for i, b in enumerate(chain):
            cache.k[:, :, i * chunk : (i + 1) * chunk] = b.k
            cache.v[:, :, i * chunk : (i + 1) * chunk] = b.v
        cache.length = n = len(chain) * chunk
        self.stats.reused_tokens += n
        self._touch(chain)
        return n

    def store(self, prompt: list[int], cache: KVCache, chunk: int) -> None:
        """Keep the whole chunks prefilled so far (call after each prefill chunk, before decoding)."""
        if not self.enabled:
            return
        full = min(cache.length, len(prompt)) // chunk
        chain = self._chain(prompt, chunk, full)
        parent = chain[-1].id if chain else -1
        for i in range(len(chain), full):
            s = slice(i * chunk, (i + 1) * chunk)
            key = (parent, tuple(prompt[s]))
            b = _Block(self._ids, key, cache.k[:, :, s].clone(), cache.v[:, :, s].clone())
            self._ids += 1
            if chain:
                chain[-1].children.add(key)
            self._blocks[key] = self._by_id[b.id] = b
            self.nbytes += b.nbytes
            self.stats.stored_blocks += 1
            chain.append(b)
            parent = b.id
        self._touch(chain)
        while self.nbytes > self.budget_bytes and self._blocks:
            self._evict(next(iter(self._blocks)))

    def _evict(self, key: _Key) -> None:
        b = self._blocks.pop(key, None)
        if b is None:
            return
        del self._by_id[b.id]
        self.nbytes -= b.nbytes
        self.stats.evicted_blocks += 1
        if (parent := self._by_id.get(key[0])) is not None:
            parent.children.discard(key)
        for child in list(b.children):  # unreachable without their parent
            self._evict(child)

    def info(self) -> dict:
        """Figures for /metrics and `stats`: lookups, hits, misses, reused tokens, blocks, bytes."""
        s = self.stats
        return {
            "enabled": self.enabled,
            "block_tokens": self.block_tokens,
            "lookups": s.lookups,
            "hits": s.hits,
            "misses": s.lookups - s.hits,
            "reused_tokens": s.reused_tokens,
            "blocks": len(self._blocks),
            "bytes": self.nbytes,
            "budget_bytes": self.budget_bytes,
            "stored_blocks": s.stored_blocks,
            "evicted_blocks": s.evicted_blocks,
        }
