"""Suffix-match drafts from a request's own context: prompt + output (SuffixDecoding's per-request
tree, prompt lookup decoding's copy), a source of the one draft policy (draft_policy.py).

The trie (memory_decoding) matches the last 2 tokens, so it cannot tell the place a copy comes
from when those 2 tokens occur many times; the longer the stretch before the root that matches
an earlier place of the context, the likelier the text goes on as it did there (replayed on the
bench's greedy outputs: a 1-token match gives under 1 accepted token of 16, 8+ tokens about 7).
So each step this source finds the earlier occurrences of the context's last token with the
longest suffix matches (suffix_match.py), up to MAX_MATCH tokens, and offers the continuations
of the best OCCURRENCES of them as one tree (a text that runs into the end of the context goes on
periodically: a loop keeps looping).

Estimates: a node's conditional estimate is MATCH_PRIOR of the longest match through it, times
its share of its parent's occurrences (weighted 2^m: the longer match knows more). The priors
put each band of match lengths into its own band of the policy's Q_EDGES, so the policy's
calibration table, kept per (source, depth band, q band), measures acceptance per match length
and depth online; the priors only rank nodes before that evidence. The policy then sizes the
draft against the forward-cost curve: long matches earn long drafts, a 1-token match rarely
more than a row or two.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from .suffix_match import continuations, suffix_matches
from .tree import ROOT, DraftTree

MAX_MATCH = 32          # suffix tokens compared: a longer match says little more
OCCURRENCES = 4         # earlier occurrences whose continuations are offered
RECENT = 48             # candidate occurrences looked at, the most recent first
DEPTH_PER_MATCH = 3     # draft depth allowed per token of match, plus one
CANDIDATES = 2          # nodes offered per node the budget allows (the policy picks among them)
# match length 1, 2, 3-4, 5-8, 9+ -> a conditional estimate in a band of its own (Q_EDGES)
MATCH_EDGES = (2, 3, 5, 9)
MATCH_PRIOR = (0.25, 0.4, 0.55, 0.75, 0.9)


def match_prior(m: int) -> float:
    """The conditional estimate of a copied token whose occurrence matched m tokens."""
    return MATCH_PRIOR[bisect_right(MATCH_EDGES, m)]


@dataclass
class _Context:
    tokens: list[int] = field(default_factory=list)
    last: dict[int, list[int]] = field(default_factory=dict)              # token -> positions
    pairs: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # bigram -> end positions

    def extend(self, tokens: Iterable[int]) -> None:
        toks, last, pairs = self.tokens, self.last, self.pairs
        for t in tokens:
            t = int(t)
            i = len(toks)
            toks.append(t)
            last.setdefault(t, []).append(i)
            if i:
                pairs.setdefault((toks[i - 1], t), []).append(i)

    def candidates(self) -> list[int]:
        """Earlier positions of the last token, most recent first: those that end the same
        bigram when there are any (a 1-token match is the weakest), else any."""
        toks = self.tokens
        n = len(toks)
        found = self.pairs.get((toks[-2], toks[-1]), []) if n >= 2 else []
        if len(found) < 2:
            found = self.last.get(toks[-1], []) if n else []
        return [j for j in found[-RECENT - 1:][::-1] if j < n - 1][:RECENT]


class SuffixSource:
    """Per request, an index of its context; candidates() offers the continuations of the
    longest suffix matches, with their estimates, as a DraftTree for the draft policy."""

    def __init__(self, eos_token_ids: Iterable[int] = ()) -> None:
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self._ctx: dict[Hashable, _Context] = {}

    def begin(self, key: Hashable, prompt: Sequence[int]) -> None:
        ctx = self._ctx[key] = _Context()
        ctx.extend(prompt)

    def end(self, key: Hashable) -> None:
        self._ctx.pop(key, None)

    def candidates(self, key: Hashable, context: Sequence[int], budget: int) -> DraftTree:
        """At most CANDIDATES * budget nodes below the root context[-1], best first, none
        deeper than budget; each with its estimate (the product of its path's conditional ones)."""
        ctx = self._ctx[key]
        if len(context) > len(ctx.tokens):
            ctx.extend(context[len(ctx.tokens):])
        toks = ctx.tokens
        if budget <= 0 or len(toks) < 2 or toks[-1] in self.eos:
            return DraftTree()
        scored = suffix_matches(toks, len(toks), ctx.candidates(), MAX_MATCH)
        if not scored:
            return DraftTree()
        # SuffixDecoding's cap: a short match does not earn a deep draft (the policy would not
        # send its deep nodes anyway; building them costs Python time every step)
        depth = min(budget, DEPTH_PER_MATCH * (scored[0][0] + 1))
        c = continuations(toks, len(toks), scored, OCCURRENCES, depth, _weight, periodic=True)
        tree, score, best = c.tree, c.score, c.best
        probs: list[float] = []
        for i, par in enumerate(tree.parents):
            share = score[i] / (c.total if par == ROOT else score[par])
            q = match_prior(best[i]) * share
            probs.append(q if par == ROOT else probs[par] * q)
        tree.probs = probs
        eos = self.eos
        order = sorted(range(len(tree)), key=lambda i: -probs[i])[:CANDIDATES * budget]
        keep = {i for i in order if tree.tokens[i] not in eos}
        return tree.pruned(keep.__contains__)


def _weight(m: int) -> float:
    return 2.0 ** m
