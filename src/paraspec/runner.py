"""ModelRunner: owns the model; runs prefill and batched decode/verify forwards.

The decode step of a batch is one forward over every sequence's query (root + draft tree +
lookahead branch), each against its own KV cache with its own mask; it returns each
sequence's logits for the rows it asked for. Committing the accepted path is the caller's
(engine's) job, through KVCache.commit.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from .decoding.policy.cost import plausible_curve
from .errors import ConfigError
from .decoding.contract.verify import Query
from .model.kv_cache import KVCache
from .prefix_cache import PrefixCache
from .model.attention import max_draft_rows
from .model.linear import ROW_MULTIPLE
from .model.transformer import SeqInput, Transformer


COST_ENV = "PARASPEC_FORWARD_COST"


@dataclass(frozen=True)
class CostProbe:
    """What the start-up probe read, before its shape was made plausible."""

    measured: dict[int, float]  # t(k)/t(1) at the probed sizes
    sizes: tuple[int, ...]
    multiple: int  # the forward's row padding
    replaced: tuple[int, ...]  # sizes read implausibly (the prior's shape instead)
    pinned: bool  # given by PARASPEC_FORWARD_COST, not measured here


def parse_pinned_curve(text: str) -> dict[int, float]:
    try:
        curve = {int(k): float(v) for k, v in json.loads(text).items()}
    except (ValueError, AttributeError, TypeError):
        raise ConfigError(
            f"{COST_ENV}={text!r} is not a JSON object of row counts to costs; pass e.g. "
            '\'{"1": 1, "4": 3.04, "16": 11.16}\''
        ) from None
    if not curve or min(curve) < 1:
        raise ConfigError(
            f'{COST_ENV} needs row counts from 1 up, e.g. \'{{"1": 1, "16": 11.16}}\''
        )
    return curve


class ModelRunner:
    def __init__(self, model: Transformer, prefill_chunk: int = 256):
        self.model = model
        self.prefill_chunk = prefill_chunk
        self._cost: dict[int, float] | None = None
        self.cost_probe: CostProbe | None = None

    def forward_cost(
        self,
        context: int = 256,
        sizes: tuple[int, ...] = (4, 8, 12, 16, 24, 32, 48, 64),
        rounds: int = 5,
    ) -> dict[int, float]:
        """t(k) / t(1) for every k from 1 to max(sizes) (sizes: multiples of ROW_MULTIPLE): the
        time of a forward over k query tokens relative to one, probed once on this machine over a
        scratch cache and given a physically plausible shape (cost.plausible_curve); the engine
        refreshes it from its own steps (decoding/policy/cost.py, CurveRefresh). Drafters use it
        to decide how many draft tokens are worth verifying. PARASPEC_FORWARD_COST='{"1": 1, "2": 2.08, ...}'
        pins another machine's curve instead (shaped the same way, never refreshed).

        The forward pads its rows to a multiple of ROW_MULTIPLE, so the true curve is a staircase:
        5 rows cost what 8 do, not what a line from 4 to 8 would say. Every k gets the cost of
        its padded size, so a drafter sees that a 4th draft node buys a whole step up and that
        the 5th to 7th then come free (docs/design-notes.md)."""
        if self._cost is None:
            multiple = self.row_multiple
            if multiple == 1 and sizes[0] != 1:
                # an unpadded forward: one row has its own cost (a GEMV; 2+ rows run row tiles,
                # and 2 rows cost most of what 4 do, not a third of the way there), and the few
                # rows most drafts are made of are measured, not interpolated
                sizes = tuple(sorted({1, 2, 3, 6, *sizes}))
            # a short context: the probe's rows need positions in it (sizes up to half of it)
            sizes = tuple(k for k in sizes if 2 * k <= self.max_seq_len) or sizes[:1]
            context = max(1, min(context, self.max_seq_len - max(sizes) - 1))
            pinned = os.environ.get(COST_ENV, "").strip()
            measured = parse_pinned_curve(pinned) if pinned else self._probe(context, sizes, rounds)
            shaped = plausible_curve(measured, multiple)
            self.cost_probe = CostProbe(
                measured, tuple(sorted(measured)), multiple, shaped.replaced, bool(pinned)
            )
            self._cost = shaped.curve
        return self._cost

    @property
    def row_multiple(self) -> int:
        return getattr(self.model, "row_multiple", ROW_MULTIPLE)

    def _probe(self, context: int, sizes: tuple[int, ...], rounds: int) -> dict[int, float]:
        """Median seconds of a forward of each size over a scratch cache, relative to the smallest."""
        cache = self.new_cache(context + max(sizes) + 1)
        self.prefill(cache, [0] * context)
        # shapes interleaved, a new order each round, and the median kept: one shape timed
        # back to back looks cheaper than the same shape mixed with others, as in decoding
        times: dict[int, list[float]] = {k: [] for k in sizes}
        order = list(sizes)
        for _ in range(rounds):
            order = order[1::2] + order[0::2][::-1]
            for k in order:
                t0 = time.perf_counter()
                self.model.forward(
                    torch.zeros(k, dtype=torch.long),
                    torch.arange(context, context + k),
                    [SeqInput(cache, k)],
                    torch.arange(k),
                )
                times[k].append(time.perf_counter() - t0)
        # one row runs padded to ROW_MULTIPLE rows: it costs what the smallest size does
        first = float(np.median(times[sizes[0]]))
        return {1: 1.0, **{k: float(np.median(times[k])) / first for k in sizes}}

    @property
    def max_seq_len(self) -> int:
        return self.model.args.max_seq_len

    @property
    def vocab_size(self) -> int:
        return self.model.args.vocab_size

    def draft_room(self, cache: KVCache, most: int) -> int:
        """Draft rows (at most `most`) the attention lets follow the root over this cache: the torch
        path's fixed key chunks must not be straddled by the root and its drafts (its exactness
        rests on that); the compiled attention is exact wherever the rows fall."""
        return (
            most if self.model.kernels.attention is not None else min(most, max_draft_rows(cache))
        )

    def new_cache(self, capacity: int) -> KVCache:
        return self.model.new_cache(min(capacity, self.max_seq_len))

    def prefill(self, cache: KVCache, tokens: list[int]) -> torch.Tensor:
        """Fill the cache with `tokens` and return the logits [vocab] of the last one."""
        while (logits := self.prefill_next(cache, tokens)) is None:
            pass
        return logits

    def prefill_next(
        self,
        cache: KVCache,
        tokens: list[int],
        keep: PrefixCache | None = None,
        features: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
        """Prefill the next chunk of `tokens` (the cache holds tokens[:cache.length]); the logits [vocab] of the
        last token once the chunk holding it is done, else None. Chunks start at multiples of
        prefill_chunk: whether they run back to back or between decode steps, the bits are the same
        (and so a later prompt may reuse them: `keep` stores the whole chunks, prefix_cache.py).
        features: the logits and the last token's feature [dim] (verify_features), for a drafter
        that drafts from it."""
        start = cache.length
        chunk = tokens[start : start + self.prefill_chunk]
        pos = torch.arange(start, start + len(chunk))
        last = torch.tensor([len(chunk) - 1])
        out = self.model.forward(
            torch.tensor(chunk),
            pos,
            [SeqInput(cache, len(chunk))],
            last,
            prompt=True,
            features=features,
        )
        cache.commit(range(len(chunk)))
        if keep is not None:
            keep.store(tokens, cache, self.prefill_chunk)
        if cache.length < len(tokens):
            return None
        return (out[0][0], out[1][0]) if features else out[0]

    def verify(self, caches: list[KVCache], queries: list[Query]) -> list[torch.Tensor]:
        """One forward over all queries; returns per query the logits of its `logits_rows`."""
        return self._verify(caches, queries, False)[0]

    def verify_features(
        self, caches: list[KVCache], queries: list[Query]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """verify, and per query the last hidden states of its `logits_rows` (Transformer.forward's
        features), for a drafter that drafts from them."""
        logits, features = self._verify(caches, queries, True)
        assert features is not None
        return logits, features

    def _verify(
        self, caches: list[KVCache], queries: list[Query], features: bool
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        tokens, positions, rows, seqs = [], [], [], []
        offset = 0
        for cache, q in zip(caches, queries):
            tokens += q.tokens
            positions += q.positions
            rows += [offset + r for r in q.logits_rows]
            seqs.append(SeqInput(cache, len(q.tokens), q.mask, q.mask_from, q.key_order))
            offset += len(q.tokens)
        out = self.model.forward(
            torch.tensor(tokens),
            torch.tensor(positions),
            seqs,
            torch.tensor(rows),
            features=features,
        )
        logits, hidden = out if features else (out, None)
        sizes = [len(q.logits_rows) for q in queries]
        return list(logits.split(sizes)), None if hidden is None else list(hidden.split(sizes))
