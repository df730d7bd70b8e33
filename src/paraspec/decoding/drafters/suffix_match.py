"""Suffix matching over a token sequence: where the text that ends a sequence occurred before, and
what followed it there (prompt lookup decoding with the longest suffix match; SuffixDecoding,
Oliaro et al. 2024, without the global suffix tree: one request's own tokens).

Two steps, shared by the drafters that copy from a context (decoding/drafters/suffix.py: a request's
prompt and output; aspd/context_match.py: an ASPD branch's prefix and own tokens):
  * `suffix_matches`: each candidate earlier position j of the sequence's last token, scored by
    how many tokens before it match too (its suffix match length m, capped), longest first, then
    the most recent (or of another sequence's last token: a memory of past outputs);
  * `continuations`: the tokens after the best occurrences merged into one tree, with per node
    the summed weight of the occurrences through it and the longest match among them.
    periodic=True: an occurrence whose continuation runs into the sequence's end goes on with
    the draft's own tokens (a text that repeats with period P keeps repeating: "a b a b" + "a b").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..contract.tree import ROOT, DraftTree


def suffix_matches(
    seq: Sequence[int],
    end: int,
    positions: Iterable[int],
    max_match: int,
    query: Sequence[int] | None = None,
) -> list[tuple[int, int]]:
    """(m, j) for each position j < end - 1 with seq[j] == seq[end - 1]: m = the length of the
    common suffix of seq[:j + 1] and seq[:end], at most max_match; longest first, then the most
    recent. positions: candidate j's (the caller's index of the last token). With a `query`, its
    suffix is matched instead, at any j < end (seq is another text: a memory of past outputs)."""
    q = seq if query is None else query
    last = (end if query is None else len(query)) - 1
    limit = last if query is None else end
    out: list[tuple[int, int]] = []
    for j in positions:
        if j >= limit or seq[j] != q[last]:
            continue
        out.append((_common_suffix(seq, j, q, last, min(max_match, j + 1, last + 1)), j))
    out.sort(key=lambda e: (-e[0], -e[1]))
    return out


_CHUNK = 8  # tokens compared at once (a list slice compares in C; copies match for long runs)


def _common_suffix(a: Sequence[int], i: int, b: Sequence[int], k: int, cap: int) -> int:
    """How many tokens a[..i] and b[..k] have in common going back (a[i] == b[k]), at most cap."""
    m = 1
    while m < cap:
        n = min(_CHUNK, cap - m)
        if a[i - m - n + 1 : i - m + 1] != b[k - m - n + 1 : k - m + 1]:
            break
        m += n
    while m < cap and a[i - m] == b[k - m]:
        m += 1
    return m


@dataclass
class Continuations:
    tree: DraftTree = field(default_factory=DraftTree)  # no estimates: see score / best
    score: list[float] = field(default_factory=list)  # per node: sum of its occurrences' weights
    best: list[int] = field(default_factory=list)  # per node: longest match through it
    total: float = 0.0  # the weight of every occurrence used
    used: list[tuple[int, int]] = field(default_factory=list)  # those occurrences, (m, j)


def continuations(
    seq: Sequence[int],
    end: int,
    scored: Sequence[tuple[int, int]],
    occurrences: int,
    max_depth: int,
    weight: Callable[[int], float],
    periodic: bool = False,
) -> Continuations:
    """The continuations of the first `occurrences` of `scored` ((m, j) from suffix_matches) that
    have at least one token, at most max_depth tokens each, merged into a tree (parents first)."""
    tokens: list[int] = []
    parents: list[int] = []
    score: list[float] = []
    best: list[int] = []
    index: dict[tuple[int, int], int] = {}
    used: list[tuple[int, int]] = []
    total = 0.0
    for m, j in scored:
        if len(used) >= occurrences:
            break
        stop = j + 1 + max_depth if periodic else min(j + 1 + max_depth, end)
        if stop <= j + 1:
            continue
        used.append((m, j))
        w = weight(m)
        total += w
        parent = ROOT
        path: list[int] = []
        period = end - 1 - j
        for i in range(j + 1, stop):
            # past the end the copy goes on with its own tokens, one period back
            t = seq[i] if i < end else path[i - j - 1 - period]
            if t < 0:  # a separator: the text it ends is not continued
                break
            path.append(t)
            node = index.get((parent, t))
            if node is None:
                node = index[(parent, t)] = len(tokens)
                tokens.append(t)
                parents.append(parent)
                score.append(w)
                best.append(m)
            else:
                score[node] += w
                if m > best[node]:
                    best[node] = m
            parent = node
    return Continuations(DraftTree(tokens, parents), score, best, total, used)
