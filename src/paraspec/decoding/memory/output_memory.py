"""Token sequences indexed by bigram, and the engine's memory of finished requests' outputs.

`TokenIndex` is what the suffix source matches in (suffix.py): a request's own prompt + output,
or the past outputs. `OutputMemory` is the latter, SuffixDecoding's global tree kept as one token
list: each finished output, up to its stop token, then SEPARATOR (no match or copy crosses it),
at most max_tokens (the older half goes when it is full). Like the trie it is owned by the
engine's DrafterRegistry, shared by every drafter that drafts from it, and saved with the trie
by LLM.save_memory (memory_file.py).

It also remembers which prompt each output answered, by a 63-bit digest of the prompt's tokens
and of whatever else decides the answer (the sampling parameters that shape it; the prompt itself
is not kept), up to ANSWERS_KEPT answers a key: a request whose prompt was answered before under
the same parameters replays those answers as its draft from its first step (suffix.py), where a
suffix match could only start once the answer's own first tokens single out the earlier output
among the others that begin alike. An answer that was a draw (sampling without a seed) is kept
for matching only: another draw would follow it a few tokens at most, and a greedy request of the
same prompt not at all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

MAX_MEMORY = 1 << 17  # tokens of past outputs kept (the older half goes when it is full)
SEPARATOR = -1  # between two outputs in the memory: no match or copy crosses it
RECENT = 48  # candidate occurrences looked at, the most recent first
# answers kept per key, the newest: decoding that its parameters decide writes one answer again and
# again (kept once); others come from an answer cut short (max_tokens) or written with other
# numerics (a memory file from another machine)
ANSWERS_KEPT = 4


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


def prompt_key(prompt: Sequence[int], identity: bytes = b"") -> int:
    """A prompt's digest, the same in every process (saved with the memory): 63 bits, so it
    fits an int64 array and two different prompts share one about never. `identity`: what else
    decides the answer (SamplingParams.answer_identity; empty for plain greedy decoding, whose
    digest is the prompt's alone, as memory files saved before it was known hold)."""
    digest = hashlib.blake2b(np.asarray(prompt, dtype=np.int64).tobytes(), digest_size=8)
    if identity:
        digest.update(identity)
    return int.from_bytes(digest.digest(), "little") >> 1


class OutputMemory:
    """Finished outputs, newest last, for suffix matching (suffix.py) and saving (memory_file.py);
    per prompt answered, where its newest answers start."""

    def __init__(self, max_tokens: int = MAX_MEMORY) -> None:
        self.max_tokens = max_tokens
        self.index = TokenIndex()
        # prompt_key -> where its answers start (their first token), oldest first
        self.answers: dict[int, list[int]] = {}
        # bumped whenever positions move (the older half dropped): a replay that holds a
        # position from before must let go of it
        self.generation = 0

    def __len__(self) -> int:
        return len(self.index.tokens)

    def add(
        self,
        output: Sequence[int],
        prompt: Sequence[int] | None = None,
        identity: bytes | None = b"",
    ) -> None:
        """One finished output (already cut at its stop token), and the prompt it answered, kept
        as its answer under `identity` (None: the output was a draw, matched but not replayed);
        under 2 tokens: nothing to match."""
        if len(output) < 2:
            return
        written = list(output) + [SEPARATOR]
        key = None if prompt is None or identity is None else prompt_key(prompt, identity)
        if key in self.answers:  # an answer given before is kept once (where it was written last)
            toks, n = self.index.tokens, len(written)
            self.answers[key] = [at for at in self.answers[key] if toks[at : at + n] != written]
        self._extend(written)
        if key is not None:
            self._keep(key, len(self.index.tokens) - len(written))

    def answer(self, prompt: Sequence[int], identity: bytes = b"") -> list[int]:
        """Where the answers to exactly this prompt, written under `identity`, start in
        index.tokens, oldest first."""
        if not self.answers:
            return []
        return list(self.answers.get(prompt_key(prompt, identity), ()))

    def tokens(self) -> np.ndarray:
        """The memory as saved: outputs, each followed by SEPARATOR."""
        return np.asarray(self.index.tokens, dtype=np.int32)

    def answer_array(self) -> np.ndarray:
        """The answers as saved: rows of (prompt_key, position in tokens()), oldest first."""
        rows = [(k, at) for k, ats in self.answers.items() for at in ats]
        return np.asarray(sorted(rows, key=lambda r: r[1]), dtype=np.int64).reshape(-1, 2)

    def merge_tokens(self, tokens: np.ndarray, answers: np.ndarray | None = None) -> None:
        """Append saved outputs (OutputMemory.tokens() of another memory) after this one's, and
        their answers (answer_array(): positions in `tokens`)."""
        toks = tokens.tolist()
        cut = 0
        if len(toks) > self.max_tokens:  # the file's newest outputs, from an output's start
            cut = len(toks) - self.max_tokens
            while cut < len(toks) and toks[cut - 1] != SEPARATOR:
                cut += 1
            toks = toks[cut:]
        self._extend(toks)
        base = len(self.index.tokens) - len(toks) - cut
        for key, at in [] if answers is None else answers.tolist():
            if at >= cut:
                self._keep(key, base + at)

    def _keep(self, key: int, at: int) -> None:
        """An answer to prompt `key` starts at `at`: the newest ANSWERS_KEPT are kept."""
        kept = self.answers.setdefault(key, [])
        kept.append(at)
        del kept[:-ANSWERS_KEPT]

    def _extend(self, toks: list[int]) -> None:
        if len(self.index.tokens) + len(toks) > self.max_tokens:  # keep the newer half
            drop = len(self.index.tokens) // 2
            kept = self.index.tokens[drop:]
            if len(kept) + len(toks) > self.max_tokens:
                kept, drop = [], len(self.index.tokens)
            self.index = TokenIndex()
            self.index.extend(kept)
            moved = {k: [at - drop for at in ats if at >= drop] for k, ats in self.answers.items()}
            self.answers = {k: ats for k, ats in moved.items() if ats}
            self.generation += 1
        self.index.extend(toks)
