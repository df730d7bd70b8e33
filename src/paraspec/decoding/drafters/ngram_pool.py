"""The n-gram pool of lookahead decoding: key token -> at most G n-grams that followed it.

An entry is the N-1 tokens seen right after `key` (so key + entry is one N-gram). Each key keeps
its entries in least-recently-used order: inserting an entry that is already there makes it the
newest, inserting a new one into a full key evicts the oldest (LADE `GUESS_SET_SIZE`, MindIE `la`).
Entries come from three places, all through `add`: the prompt, the committed output and the
Jacobi window's columns. The pool is per request, like in LADE and MindIE.

EOS never enters the pool: an n-gram that contains an end token would draft "the request ends
here" followed by tokens the model never sees, so `add` drops it.

Pure Python on purpose: a dict per key keeps insertion order (the LRU order) and every operation
is O(N) per n-gram; the pool is touched ~W + k times per step (k = tokens committed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class NgramPool:
    """key -> up to `guess_set_size` n-grams of `ngram_len` tokens, least recently used first."""

    def __init__(self, ngram_len: int, guess_set_size: int, eos_token_ids: Iterable[int] = ()):
        if ngram_len < 1 or guess_set_size < 1:
            raise ValueError(
                f"NgramPool: ngram_len ({ngram_len}) and guess_set_size "
                f"({guess_set_size}) must be >= 1"
            )
        self.ngram_len = ngram_len
        self.guess_set_size = guess_set_size
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        # NOTE: a dict used as an ordered set; iteration order = LRU order (oldest first).
        self._entries: dict[int, dict[tuple[int, ...], None]] = {}

    def add(self, key: int, ngram: tuple[int, ...]) -> bool:
        """Insert (or refresh) `ngram` under `key`. Returns False when it was dropped (EOS)."""
        if len(ngram) != self.ngram_len:
            raise ValueError(
                f"NgramPool.add: n-gram has {len(ngram)} tokens, expected {self.ngram_len}"
            )
        eos = self.eos_token_ids
        if eos and (key in eos or not eos.isdisjoint(ngram)):
            return False
        bucket = self._entries.get(key)
        if bucket is None:
            self._entries[key] = {ngram: None}
            return True
        if ngram in bucket:
            del bucket[ngram]  # re-inserted below as the newest
        elif len(bucket) >= self.guess_set_size:
            del bucket[next(iter(bucket))]
        bucket[ngram] = None
        return True

    def add_sequence(self, tokens: Sequence[int]) -> None:
        """Insert every N-gram (t[i]; t[i+1 .. i+N-1]) of `tokens`, oldest first, so the newest
        occurrence of a repeated n-gram ends up most recent."""
        toks = [int(t) for t in tokens]
        n = self.ngram_len
        for i in range(len(toks) - n):
            self.add(toks[i], tuple(toks[i + 1 : i + 1 + n]))

    def candidates(self, key: int) -> list[tuple[int, ...]]:
        """The n-grams stored under `key`, most recently used first."""
        bucket = self._entries.get(key)
        return list(reversed(bucket)) if bucket else []

    def __contains__(self, key: int) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        """Number of stored n-grams over all keys."""
        return sum(len(b) for b in self._entries.values())

    def num_keys(self) -> int:
        return len(self._entries)
