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

The same matching runs over a memory of finished requests' outputs (memory(): SuffixDecoding's
global tree, here a token list indexed by bigram: output_memory.py, owned by the engine and saved
with the trie like it): an answer that repeats an earlier one is copied from the place the
longest suffix matches, where the trie's 2-token match splits its counts among every output that
shares those 2 tokens. It is a source of its own for the policy (its acceptance differs from the
context's). While the context matches itself over SETTLED_MATCH+ tokens (it is copying, and its
copy runs as deep as the budget) the memory is not searched: replayed, that costs no accepted
token and saves its Python time.

A request whose prompt the memory has answered before under the same parameters (OutputMemory.answer,
keyed by the request's answer identity: greedy, or seeded sampling with the same seed and
settings) replays those answers: replay() offers them as one tree from the first decode step, each
while the output so far is its start (such decoding of the same prompt by the same model writes
its answer again, token for token; an answer cut short, or written with other numerics, may
differ, and the first token that differs drops it). A draw (sampling without a seed) neither
replays nor is kept as an answer: another draw would follow it a few tokens at most. Its nodes carry
REPLAY_PRIOR times their share of the answers through their parent, a source of its own for the
policy, which calibrates it like the others; while it runs the past outputs are not searched
(the replay is their best match).

Estimates: a node's conditional estimate is MATCH_PRIOR of the longest match through it, times
its share of its parent's occurrences (weighted 2^m: the longer match knows more). The priors
put each band of match lengths into its own band of the policy's Q_EDGES, so the policy's
calibration table, kept per (source, depth band, q band), measures acceptance per match length
and depth online; the priors only rank nodes before that evidence. The policy then sizes the
draft against the forward-cost curve: long matches earn long drafts, a 2-token match rarely
more than a few rows.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from ..memory.output_memory import SEPARATOR, OutputMemory, TokenIndex
from .suffix_match import Continuations, continuations, suffix_matches
from ..contract.tree import ROOT, DraftTree

MIN_MATCH = 2  # a best match shorter than this is left to the trie (its 1-token
# matches are accepted rarely: not worth the Python time)
MAX_MATCH = 32  # suffix tokens compared: a longer match says little more
SETTLED_MATCH = 16  # the context's own match at least this long: the past outputs are not looked up
OCCURRENCES = 4  # earlier occurrences whose continuations are offered
DEPTH_PER_MATCH = 3  # draft depth allowed per token of match, plus one
CANDIDATES = 2  # nodes offered per node the budget allows (the policy picks among them)
# match length 1, 2, 3-4, 5-8, 9+ -> a conditional estimate in a band of its own (Q_EDGES)
MATCH_EDGES = (2, 3, 5, 9)
MATCH_PRIOR = (0.25, 0.4, 0.55, 0.75, 0.9)
# a replayed answer's conditional estimate, before the policy measures it: only answers the
# request's parameters decide are replayed, so nearly every token is written again; a lower prior
# compounds over a long answer and lets other sources' shallow nodes take the chain's deep rows in
# an engine's first replay, before the policy has measured any
REPLAY_PRIOR = 0.995


def match_prior(m: int) -> float:
    """The conditional estimate of a copied token whose occurrence matched m tokens."""
    return MATCH_PRIOR[bisect_right(MATCH_EDGES, m)]


class SuffixSource:
    """Per request, an index of its context; and a memory of finished requests' outputs (the
    engine's, shared by its drafters as the trie is; a new one if None). candidates() offers the
    continuations of the context's longest suffix matches in its own context, memory() those in
    the past outputs: two trees for the draft policy, each node with its estimate."""

    def __init__(
        self, eos_token_ids: Iterable[int] = (), output_memory: OutputMemory | None = None
    ) -> None:
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self.output_memory = output_memory if output_memory is not None else OutputMemory()
        self._ctx: dict[Hashable, TokenIndex] = {}
        self._prompt_len: dict[Hashable, int] = {}
        self._settled: dict[Hashable, bool] = {}  # the step's own match is long: memory() skips
        self._replay: dict[Hashable, _Replay] = {}
        self._identity: dict[Hashable, bytes | None] = {}

    def begin(self, key: Hashable, prompt: Sequence[int], identity: bytes | None = b"") -> None:
        """A request: its prompt, and what else decides its answer (None: a draw, not replayed
        and not kept as an answer; SamplingParams.answer_identity)."""
        ctx = self._ctx[key] = TokenIndex()
        ctx.extend(prompt)
        self._prompt_len[key] = len(prompt)
        self._identity[key] = identity
        answers = [] if identity is None else self.output_memory.answer(prompt, identity)
        if answers:
            self._replay[key] = _Replay(self.output_memory.generation, answers[::-1])

    def replaying(self, key: Hashable) -> bool:
        """The request's output so far is an earlier answer to its prompt (call replay() first
        in a step: it reads the step's output)."""
        return key in self._replay

    def sync(self, key: Hashable, context: Sequence[int]) -> None:
        """The step's context: tokens committed without observe (the prefill's) join the index."""
        ctx = self._ctx[key]
        if len(context) > len(ctx.tokens):
            ctx.extend(context[len(ctx.tokens) :])

    def replay(self, key: Hashable, budget: int) -> DraftTree:
        """The rest of the earlier answers to this prompt that the output still follows, as one
        tree at most budget deep (empty when there are none). Call sync() or candidates() first:
        they read the step's context."""
        r = self._live_replay(key)
        if r is None or budget <= 0:
            return DraftTree()
        mem = self.output_memory.index.tokens
        # each answer as an occurrence that ends where the output is now (equal weights)
        scored = [(1, at + r.checked - 1) for at in r.starts]
        c = continuations(mem, len(mem), scored, len(scored), budget, _equal)
        c.tree.probs = _estimates(c, [REPLAY_PRIOR] * len(c.tree))
        return c.tree

    def observe(self, key: Hashable, committed: Sequence[int]) -> None:
        """Tokens committed (the last step's reach the memory at end() even without a next step)."""
        self._ctx[key].extend(committed)

    def _live_replay(self, key: Hashable) -> _Replay | None:
        """The request's replay, with the answers its output so far is still the start of."""
        r = self._replay.get(key)
        if r is None:
            return None
        mem = self.output_memory
        if mem.generation != r.generation:  # the memory dropped its older half: positions moved
            del self._replay[key]
            return None
        toks = self._ctx[key].tokens
        out = self._prompt_len[key]
        done = len(toks) - out
        if done > r.checked:  # the tokens committed since the last look: the answer's next ones?
            new, written = toks[out + r.checked :], mem.index.tokens
            # ... and an answer the output has run to the end of (it was cut short: max_tokens)
            # has nothing left to offer
            r.starts = [
                at
                for at in r.starts
                if written[at + r.checked : at + done] == new and written[at + done] != SEPARATOR
            ]
            r.checked = done
        if not r.starts:
            del self._replay[key]
            return None
        return r

    def end(self, key: Hashable) -> None:
        """The request's output joins the memory (up to its first stop token)."""
        ctx = self._ctx.pop(key, None)
        start = self._prompt_len.pop(key, 0)
        self._settled.pop(key, None)
        self._replay.pop(key, None)
        identity = self._identity.pop(key, b"")
        if ctx is None or len(ctx.tokens) <= start:
            return
        out = ctx.tokens[start:]
        stop = next((i for i, t in enumerate(out) if t in self.eos), len(out))
        self.output_memory.add(out[:stop], ctx.tokens[:start], identity)

    def candidates(self, key: Hashable, context: Sequence[int], budget: int) -> DraftTree:
        """At most CANDIDATES * budget nodes below the root context[-1], none deeper than
        budget, from the request's own context; each with its estimate (the product of its
        path's conditional ones)."""
        self.sync(key, context)
        ctx = self._ctx[key]
        toks = ctx.tokens
        if budget <= 0 or len(toks) < 2 or toks[-1] in self.eos:
            return DraftTree()
        n = len(toks)
        scored = suffix_matches(toks, n, ctx.positions(toks, n - 1), MAX_MATCH)
        # a context that matches itself this long is copying: the past outputs cannot match it
        # longer, and its own continuation (periodic) already runs as deep as the budget
        self._settled[key] = bool(scored) and scored[0][0] >= SETTLED_MATCH
        return self._tree(toks, n, scored, budget, True)

    def memory(self, key: Hashable, budget: int) -> DraftTree:
        """As candidates(), from the memory of past outputs (call candidates() first: it reads
        the step's context)."""
        toks, mem = self._ctx[key].tokens, self.output_memory.index
        if (
            budget <= 0
            or len(toks) < 2
            or toks[-1] in self.eos
            or not mem.tokens
            or self._settled.get(key)
            or self._live_replay(key) is not None
        ):
            return DraftTree()
        n = len(mem.tokens)
        scored = suffix_matches(mem.tokens, n, mem.positions(toks, n), MAX_MATCH, toks)
        return self._tree(mem.tokens, n, scored, budget, False)

    def _tree(
        self, seq: list[int], end: int, scored: list[tuple[int, int]], budget: int, periodic: bool
    ) -> DraftTree:
        if not scored or scored[0][0] < MIN_MATCH:
            return DraftTree()
        # SuffixDecoding's cap: a short match does not earn a deep draft (the policy would not
        # send its deep nodes anyway; building them costs Python time every step)
        depth = min(budget, DEPTH_PER_MATCH * (scored[0][0] + 1))
        c = continuations(seq, end, scored, OCCURRENCES, depth, _weight, periodic)
        tree = c.tree
        tree.probs = probs = _estimates(c, [match_prior(m) for m in c.best])
        eos = self.eos
        neg = [-q for q in probs]
        order = sorted(range(len(tree)), key=neg.__getitem__)[: CANDIDATES * budget]
        keep = {i for i in order if tree.tokens[i] not in eos}
        return tree.pruned(keep.__contains__)


def _estimates(c: Continuations, priors: list[float]) -> list[float]:
    """Each node's estimate: the product down its path of its prior times its share of its
    parent's occurrences (their weights)."""
    score, probs = c.score, []
    for i, par in enumerate(c.tree.parents):
        q = priors[i] * (score[i] / (c.total if par == ROOT else score[par]))
        probs.append(q if par == ROOT else probs[par] * q)
    return probs


@dataclass
class _Replay:
    generation: int  # the memory's when `starts` were read (positions move with it)
    starts: list[int]  # where the answers the output still follows start in it, newest first
    checked: int = 0  # output tokens found equal to theirs so far


def _weight(m: int) -> float:
    return 2.0**m


def _equal(m: int) -> float:
    return 1.0
