"""Per-sequence KV cache: preallocated, written by slot, compacted on commit.

Layout (all layers in one tensor):
    k: [n_layers, n_kv_heads, capacity, head_dim]   fp32, or fp16 (kv_cache_dtype="fp16")
    v: [n_layers, n_kv_heads, capacity, head_dim]   the same

Slots [0, length) hold committed tokens. A forward over q new tokens (root + draft) writes their
K/V at slots [length, length + q) without moving `length`; `commit(keep)` then keeps the chosen
new tokens and drops the rest. Worked example, length = 10, draft tree = root r, nodes a b c d:

    slot    10  11  12  13  14          commit(keep=[0, 2, 4])   slot   10  11  12
    token    r   a   b   c   d          (root, b, d accepted)    token   r   b   d    length = 13

A chain draft whose accepted nodes are its first k tokens needs no copy at all.

By default both are fp32, the dtype the forward computes them in; an fp16 cache (llama.cpp's
default) halves the bytes a decode step reads per token of context. An fp16 element is rounded
once, when it is written, and widened exactly when it is read, so attention sums the same fp32
values whatever reads them. Attention gives a row the same result whatever the number of query rows or
the gaps a tree mask leaves between its keys (attention.attention, csrc/attention.h: a fixed
order of sums per row), so parallel decoding stays token-identical to autoregressive decoding
with either cache dtype; the two dtypes' outputs can differ from each other at near-ties.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .args import ModelArgs

KEY_BUCKET = 256  # attention reads keys up to length rounded up to this multiple


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


KV_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


class KVCache:
    def __init__(self, args: ModelArgs, capacity: int, dtype: torch.dtype = torch.float32):
        self.args = args
        self.dtype = dtype
        self.capacity = round_up(max(capacity, 1), KEY_BUCKET)
        shape = (args.n_layers, args.n_kv_heads, self.capacity)
        self.k, self.v = self._alloc(shape, args.head_dim, dtype)
        self._v64: torch.Tensor | None = None  # v_with_ones's scratch
        self.length = 0

    @staticmethod
    def _alloc(
        shape: tuple[int, ...], head_dim: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # zeros, not empty: masked slots are multiplied by 0 in attention, and 0 * NaN would leak
        return torch.zeros(*shape, head_dim, dtype=dtype), torch.zeros(
            *shape, head_dim, dtype=dtype
        )

    def reserve(self, needed: int) -> None:
        """Grow (copying) so that `needed` slots fit; rarely used, capacity is sized up front."""
        if needed <= self.capacity:
            return
        new_cap = round_up(max(needed, self.capacity * 3 // 2), KEY_BUCKET)
        k, v = self._alloc((*self.k.shape[:2], new_cap), self.k.shape[3], self.dtype)
        k[:, :, : self.capacity] = self.k
        v[:, :, : self.capacity] = self.v
        self.k, self.v, self.capacity = k, v, new_cap

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write K/V of the q new tokens (k, v: [q, n_kv_heads, head_dim]) after the committed ones."""
        q = k.shape[0]
        end = self.length + q
        self.k[layer, :, self.length : end] = k.transpose(0, 1)
        self.v[layer, :, self.length : end] = v.transpose(0, 1)

    def commit(self, keep: Sequence[int]) -> None:
        """Keep new tokens `keep` (indices into the last forward's new tokens, ascending) as the
        next committed slots; everything else written by that forward is dropped."""
        n = len(keep)
        if any(i != j for i, j in enumerate(keep)):
            src = torch.tensor(keep, dtype=torch.long) + self.length
            dst = slice(self.length, self.length + n)
            # advanced indexing gathers into a temporary first, so overlapping ranges are safe
            self.k[:, :, dst] = self.k[:, :, src]
            self.v[:, :, dst] = self.v[:, :, src]
        self.length += n

    def copy_from(self, other: KVCache) -> None:
        """This cache's slots become a copy of `other`'s committed ones (a sibling sample's prompt)."""
        n = other.length
        self.reserve(n)
        self.k[:, :, :n] = other.k[:, :, :n]
        self.v[:, :, :n] = other.v[:, :, :n]
        self.length = n

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of length {self.length} to {length}")
        self.length = length

    def v_with_ones(self, layer: int, keys: int) -> torch.Tensor:
        """[V | 1] of slots [0, keys) of one layer in fp64, [n_kv_heads, keys, head_dim + 1], for the
        torch attention path: V widened exactly, and a ones column that makes the softmax
        denominator come out of the same matmul as the numerator. A view of a scratch buffer that
        the next call overwrites (kept, with its ones, so that a step allocates nothing)."""
        n_kv, cap, hd = self.v.shape[1:]
        if self._v64 is None or self._v64.shape[1] != cap:
            self._v64 = torch.ones(n_kv, cap, hd + 1, dtype=torch.float64)
        out = self._v64[:, :keys]
        out[..., :hd] = self.v[layer, :, :keys]
        return out

    def nbytes(self) -> int:
        scratch = 0 if self._v64 is None else self._v64.numel() * self._v64.element_size()
        return (
            self.k.numel() * self.k.element_size()
            + self.v.numel() * self.v.element_size()
            + scratch
        )
