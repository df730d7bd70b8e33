"""Attention in torch: the verify road (`attention`, row-invariant) and the prompt road
(`prompt_attention`, plain fp32), their additive masks, and which prompt chunks take the csrc
kernel instead (csrc/attention.h, through kernels.Kernels.rope_attention).

A verify row sees its sequence's committed slots [0, start) and what its mask allows of the
slots from start on (SeqInput); KEY_BUCKET chunks of keys keep the sum over keys the same
however far the key axis reaches, which max_draft_rows makes hold for every draft.
"""

from __future__ import annotations

import torch

from .kv_cache import KEY_BUCKET, KVCache, round_up
from .linear import ROW_MULTIPLE
from .seq_input import SeqInput


def max_draft_rows(cache: KVCache) -> int:
    """How many draft rows may follow the root in the next verify pass without the root and
    drafts straddling a KEY_BUCKET boundary (the condition for bit-exact verification)."""
    return KEY_BUCKET - 1 - cache.length % KEY_BUCKET


def attention_bias(
    cache: KVCache, q: int, tree_mask: torch.Tensor | None, group: int, mask_from: int | None = None
) -> torch.Tensor:
    """Additive mask [group * q_rows, keys] (tiled for the query heads sharing a kv head): 0 where
    a row may attend, -inf elsewhere. Rows see slots [0, start) (start: mask_from, default the
    committed length) and what tree_mask allows of the slots from start to the new rows' end.

    Keys run to the committed length + q rounded up to KEY_BUCKET (slots past the end are
    zeros and masked); query rows are padded to a multiple of ROW_MULTIPLE (pad rows see key 0).
    """
    start = cache.length if mask_from is None else mask_from
    end = cache.length + q
    keys = min(cache.capacity, round_up(end, KEY_BUCKET))
    rows = round_up(q, ROW_MULTIPLE)
    visible = torch.zeros(rows, keys, dtype=torch.bool)
    visible[:q, :start] = True
    if tree_mask is None:
        if start != cache.length:
            raise ValueError(
                "SeqInput.mask_from needs a tree_mask over the slots from mask_from on"
            )
        visible[:q, start:end] = torch.ones(q, q, dtype=torch.bool).tril_()
    else:
        visible[:q, start:end] = tree_mask
    visible[q:, 0] = True
    bias = torch.zeros(rows, keys).masked_fill_(~visible, float("-inf"))
    return bias.repeat(group, 1)


def attention(
    q: torch.Tensor, cache: KVCache, layer: int, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """Softmax attention of q [q, n_heads, head_dim] (fp32) over one sequence's cache.

    Written for row invariance rather than with F.scaled_dot_product_attention, whose kernels
    block the key axis by the number of query rows and keys: a token's output must be the same
    bits whether it is the single token of an autoregressive step or one node of a draft tree,
    whose ancestors sit in slots with masked siblings between them. So:
    - query rows are padded to a ROW_MULTIPLE multiple, as torch's matmuls are (linear.py);
    - scores are q . k in fp64 (each product of fp32 values exact) rounded to fp32: a BLAS may
      sum head_dim in an order that depends on the row count, and in fp64 that regrouping stays
      below one fp32 rounding step (as for V below); exp is per element; the max is exact in
      any order;
    - the only sum over keys, exp(scores - max) @ [V | 1] (numerator and softmax denominator
      in one matmul), accumulates in fp64 on V widened from fp32. A tree's gaps move keys across
      the matmul's internal K-blocks, which regroups the sum; in fp64 that change stays far below
      one fp32 rounding step, so the rounded result keeps its bits, where in fp32 it flipped the
      greedy token at near-ties (docs/design-notes.md, "Figures behind the code's choices");
    - keys are split into KEY_BUCKET-slot chunks summed in order, and the root and draft rows
      never straddle a chunk boundary (max_draft_rows), so a longer key axis only adds all-zero
      chunks: for chain drafts the sum is then bit-identical by construction.
    Returns [q, n_heads * head_dim].
    """
    n_q, n_heads, head_dim = q.shape
    n_kv = cache.k.shape[1]
    group = n_heads // n_kv
    keys = bias.shape[1]
    rows = bias.shape[0] // group
    if rows > n_q:
        q = torch.cat([q, q.new_zeros(rows - n_q, n_heads, head_dim)])
    k = cache.k[layer, :, :keys]  # [kv_heads, keys, head_dim]
    v = cache.v_with_ones(layer, keys)  # [kv_heads, keys, head_dim + 1] fp64
    # query heads sharing a kv head are consecutive, so they stack into one matmul per kv head
    qg = q.permute(1, 0, 2).reshape(n_kv, group * rows, head_dim)
    # [kv, g*rows, keys]
    scores = torch.baddbmm(
        bias.double(), qg.double(), k.double().transpose(1, 2), alpha=scale
    ).float()
    scores = scores.sub_(scores.amax(-1, keepdim=True)).exp_()
    # P @ [V | 1] per KEY_BUCKET chunk of keys, then summed over chunks: a longer key axis only
    # adds chunks of exact zeros, so the sum does not depend on how far the keys were padded
    chunks = keys // KEY_BUCKET
    # [kv, chunks, g*rows, KB]
    e = scores.view(n_kv, group * rows, chunks, KEY_BUCKET).transpose(1, 2).double()
    # [kv, g*rows, d + 1]
    out = torch.matmul(e, v.view(n_kv, chunks, KEY_BUCKET, head_dim + 1)).sum(1)
    out = (out[..., :head_dim] / out[..., head_dim:]).float()
    return (
        out.view(n_heads, rows, head_dim)[:, :n_q].transpose(0, 1).reshape(n_q, n_heads * head_dim)
    )


# Prompt chunks of at most PROMPT_ATTENTION_ROWS[kernels] rows attend through the csrc kernel over
# any context: torch's op overhead dominates a short chunk, and one over a long cache (a new turn
# after a reused prefix) is a verify step's shape. The AVX2 kernels also take chunks of any height
# over at most PROMPT_ATTENTION_KEYS keys. Thresholds from `benchmarks/prefill.py --attention-roads`
# (docs/benchmarks.md, "The prompt road under one activation pass").
PROMPT_ATTENTION_ROWS = {"avx512": 256, "avx2": 64}
PROMPT_ATTENTION_KEYS = 1024
PROMPT_BLOCK = 64  # query rows per block of prompt_attention: a block's scores stay in cache


def prompt_on_kernel(kernels_name: str, n_tokens: int, seqs: list[SeqInput]) -> bool:
    """Whether a prompt chunk of n_tokens rows attends through the csrc kernel (see above)."""
    return n_tokens <= PROMPT_ATTENTION_ROWS.get(kernels_name, 0) or (
        kernels_name == "avx2"
        and all(s.cache.length + s.num_tokens <= PROMPT_ATTENTION_KEYS for s in seqs)
    )


def prompt_bias(cache: KVCache, n: int, group: int) -> list[torch.Tensor]:
    """prompt_attention's additive causal masks for a chunk of n tokens after the committed ones,
    one per block of PROMPT_BLOCK query rows: [group * rows, keys up to the block's last row].
    Built once per forward, the same for every layer."""
    start = cache.length
    blocks = []
    for i0 in range(0, n, PROMPT_BLOCK):
        rows, keys = min(PROMPT_BLOCK, n - i0), start + min(n, i0 + PROMPT_BLOCK)
        # row i sees keys <= start + i0 + i
        visible = torch.ones(rows, keys, dtype=torch.bool).tril_(start + i0)
        blocks.append(
            torch.zeros(rows, keys).masked_fill_(~visible, float("-inf")).repeat(group, 1)
        )
    return blocks


def prompt_attention(
    q: torch.Tensor, cache: KVCache, layer: int, bias: list[torch.Tensor], scale: float
) -> torch.Tensor:
    """Causal attention of a prompt chunk q [n, n_heads, head_dim] (fp32) over the cache's
    committed keys and its own, in plain fp32 (softmax, then one matmul), a block of
    PROMPT_BLOCK query rows at a time: a block reads only the keys it can see (half the work of
    a square mask) and its scores stay in cache (a whole chunk's score matrix does not). Much
    faster than `attention`, whose fp64 sum over key chunks exists for row invariance. A prompt
    does not need that: every decoding mode, AR included, starts from the same prefill, so greedy
    parallel decoding stays identical to greedy AR. (F.scaled_dot_product_attention measured
    slower: docs/design-notes.md, "Figures behind the code's choices".)
    Returns [n, n_heads * head_dim]."""
    n, n_heads, head_dim = q.shape
    n_kv = cache.k.shape[1]
    group = n_heads // n_kv
    qg = q.permute(1, 0, 2).reshape(n_kv, group, n, head_dim)
    out = q.new_empty(n_kv, group, n, head_dim)
    for b, block_bias in enumerate(bias):
        i0 = b * PROMPT_BLOCK
        rows, keys = block_bias.shape[0] // group, block_bias.shape[1]
        k = cache.k[layer, :, :keys].float()  # [kv_heads, keys, head_dim]
        v = cache.v[layer, :, :keys].float()  # (a no-op on an fp32 cache)
        qb = qg[:, :, i0 : i0 + rows].reshape(n_kv, group * rows, head_dim)
        probs = torch.baddbmm(block_bias, qb, k.transpose(1, 2), alpha=scale).softmax(-1)
        out[:, :, i0 : i0 + rows] = torch.bmm(probs, v).view(n_kv, group, rows, head_dim)
    return out.view(n_heads, n, head_dim).transpose(0, 1).reshape(n, n_heads * head_dim)
