"""Drafts copied from a branch's own context: where the text a branch just wrote occurred before
(in the prompt, the serial answer, or the branch itself), what followed it there.

Prompt lookup decoding with the longest suffix match: the trie (memory_decoding) matches a
branch on its last two tokens over every past request's output, where the branch's own
earlier tokens are not yet (a block's tokens enter the trie when it closes), and where one
prompt's counts weigh as much as a single output. A branch that restates part of the prompt or
repeats its own earlier words ("76-20 = 76-20 - ...") is drafted here instead, from exactly the
tokens it sees.

Each occurrence of the context's last token earlier in the context is scored by how many tokens
before it match too (its suffix match length L, at most MAX_MATCH); the continuations of the
best occurrences (longest L, then the most recent) become a tree. Estimates: a continuation of a
match of length L goes on into its first token with L / (L + 1) (shared over the occurrences
that agree, weighted by 2^L), then each further token with FOLLOW. They are only a ranking:
the draft policy calibrates them (per source, depth and estimate band) against what branches
accepted.

A branch also often starts by restating the part of the prompt its title labels ("A) 76-20" ->
"A: 76-20 = ..."): `anchored` finds the title's text in the prompt and drafts what follows it
there (its delimiter skipped), while the branch's content is still a prefix of that.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..decoding.drafters.suffix_match import continuations, suffix_matches
from ..decoding.contract.tree import ROOT, DraftTree

MAX_MATCH = 8  # suffix tokens compared: a longer match says no more
OCCURRENCES = 4  # best earlier occurrences whose continuations are drafted
RECENT = 64  # occurrences of the last token looked at, the most recent first
FOLLOW = 0.9  # estimate of a copied token after the first, given its parent


class ContextIndex:
    """A block's shared prefix (the sequence's tokens when it opened), indexed once, and the
    matches of each branch context prefix + own tokens against itself."""

    def __init__(self, prefix: Sequence[int]):
        self.prefix = list(prefix)
        self._arr = np.asarray(self.prefix, dtype=np.int64)

    def _occurrences(self, own: Sequence[int], last: int) -> list[int]:
        """Positions (in prefix + own) before the last of `last`, most recent first."""
        n = len(self.prefix)
        mine = [n + j for j in range(len(own) - 2, -1, -1) if own[j] == last]
        if len(mine) >= RECENT:
            return mine[:RECENT]
        pos = np.flatnonzero(self._arr == last) if n else np.empty(0, dtype=np.int64)
        if not own:  # the last token is the prefix's own last: not an occurrence of itself
            pos = pos[:-1]
        return mine + [int(p) for p in pos[::-1][: RECENT - len(mine)]]

    def drafts(self, own: Sequence[int], max_nodes: int, max_depth: int) -> DraftTree:
        """Continuations of the context prefix + own, best first, at most max_nodes nodes."""
        ctx_len = len(self.prefix) + len(own)
        if max_nodes <= 0 or ctx_len < 2:
            return DraftTree()
        seq = self.prefix + list(own)
        scored = suffix_matches(seq, ctx_len, self._occurrences(own, seq[-1]), MAX_MATCH)
        c = continuations(seq, ctx_len, scored, OCCURRENCES, max_depth, _weight)
        if not c.used:
            return DraftTree()
        tree = c.tree
        total = sum(2.0**m for m, _ in c.used)
        # a node's estimate: its occurrences' weight over all occurrences' (never above its parent)
        probs = []
        for s, d, par in zip(c.score, tree.depths(), tree.parents):
            p = min(1.0, FOLLOW ** (d - 1) * s / total)
            probs.append(p if par == ROOT or p <= probs[par] else probs[par])
        tree.probs = probs
        order = sorted(range(len(tree)), key=lambda i: -probs[i])
        keep = set(order[:max_nodes])
        return tree.pruned(keep.__contains__)


def _weight(m: int) -> float:
    """An occurrence's weight in its nodes' estimates: 2^m, times m / (m + 1), the chance that a
    continuation of a match of length m goes on into its first token."""
    return 2.0**m * m / (m + 1)


def anchored(
    prompt: Sequence[int], texts: Sequence[str], title: str, max_depth: int, occurrences: int = 2
) -> list[list[int]]:
    """What follows the title's text in the prompt (texts: each prompt token's text), at its
    first `occurrences` places: the tokens after the title's, leading delimiter tokens (text
    without letters, digits or spaces, such as ")" or ":") skipped, at most max_depth of them."""
    want = title.strip()
    if not want:
        return []
    out: list[list[int]] = []
    for i in range(len(prompt)):
        text = ""
        for j in range(i, min(len(prompt), i + 8)):
            text += texts[j]
            if text.strip() == want and texts[i].strip():
                k = j + 1
                while (
                    k < len(prompt)
                    and k <= j + 2
                    and texts[k]
                    and not any(c.isalnum() or c.isspace() for c in texts[k])
                ):
                    k += 1
                if k < len(prompt):
                    out.append(list(prompt[k : k + max_depth]))
                break
            if len(text.strip()) >= len(want):
                break
        if len(out) >= occurrences:
            break
    return out


def anchored_drafts(paths: Sequence[Sequence[int]], content: Sequence[int]) -> DraftTree:
    """The anchored continuations (anchored()) the branch's content so far is a prefix of, from
    where the content ends: a chain each, estimates 1/2 then FOLLOW per token (a ranking only)."""
    tree = DraftTree(probs=[])
    index: dict[tuple[int, int], int] = {}
    n = len(content)
    for path in paths:
        if len(path) <= n or list(path[:n]) != list(content):
            continue
        parent, p = ROOT, 0.5
        for t in path[n:]:
            node = index.get((parent, t))
            if node is None:
                node = index[(parent, t)] = tree.add(t, parent, p)
            parent, p = node, p * FOLLOW
    return tree
