"""Token sequences indexed by bigram, and the engine's memory of finished requests' outputs.

`TokenIndex` is what the suffix source matches in (suffix.py): a request's own prompt + output,
or the past outputs. `OutputMemory` is the latter, SuffixDecoding's global tree kept as one token
list: each finished output, up to its stop token, then SEPARATOR (no match or copy crosses it),
at most max_tokens (the older half goes when it is full). Like the trie it is owned by the
engine's DrafterRegistry, shared by every drafter that drafts from it, and saved with the trie
by LLM.save_memory (memory_file.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

MAX_MEMORY = 1 << 17  # tokens of past outputs kept (the older half goes when it is full)
SEPARATOR = -1  # between two outputs in the memory: no match or copy crosses it
RECENT = 48  # candidate occurrences looked at, the most recent first


@dataclass
class TokenIndex:
    """A token sequence indexed by its bigrams (positions in order)."""

    tokens: list[int] = field(default_factory=list)
    pairs: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # bigram -> end positions

    def extend(self, tokens: Iterable[int]) -> None:
        toks, pairs = self.tokens, self.pairs
        for t in tokens:
            t = int(t)
            i = len(toks)
            toks.append(t)
            if i:
                pairs.setdefault((toks[i - 1], t), []).append(i)

    def positions(self, query: Sequence[int], before: int) -> list[int]:
        """Positions j < before that end the query's last bigram, most recent first (a match
        shorter than 2 tokens is left to the trie)."""
        found = [j for j in self.pairs.get((query[-2], query[-1]), ())[-RECENT - 1 :] if j < before]
        return found[::-1][:RECENT]


class OutputMemory:
    """Finished outputs, newest last, for suffix matching (suffix.py) and saving (memory_file.py)."""

    def __init__(self, max_tokens: int = MAX_MEMORY) -> None:
        self.max_tokens = max_tokens
        self.index = TokenIndex()

    def __len__(self) -> int:
        return len(self.index.tokens)

    def add(self, output: Sequence[int]) -> None:
        """One finished output (already cut at its stop token); under 2 tokens: nothing to match."""
        if len(output) >= 2:
            self._extend(list(output) + [SEPARATOR])

    def tokens(self) -> np.ndarray:
        """The memory as saved: outputs, each followed by SEPARATOR."""
        return np.asarray(self.index.tokens, dtype=np.int32)

    def merge_tokens(self, tokens: np.ndarray) -> None:
        """Append saved outputs (OutputMemory.tokens() of another memory) after this one's."""
        toks = tokens.tolist()
        if len(toks) > self.max_tokens:  # the file's newest outputs, from an output's start
            cut = len(toks) - self.max_tokens
            while cut < len(toks) and toks[cut - 1] != SEPARATOR:
                cut += 1
            toks = toks[cut:]
        self._extend(toks)

    def _extend(self, toks: list[int]) -> None:
        if len(self.index.tokens) + len(toks) > self.max_tokens:  # keep the newer half
            kept = self.index.tokens[len(self.index.tokens) // 2 :]
            self.index = TokenIndex()
            self.index.extend(kept if len(kept) + len(toks) <= self.max_tokens else [])
        self.index.extend(toks)
