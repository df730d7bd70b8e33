"""Lookahead decoding's drafter: a Jacobi window of N-1 levels x W columns plus an n-gram pool.

Fu et al., "Break the Sequential Dependency of LLM Inference Using Lookahead Decoding" (ICML 2024,
LADE); MindIE `la` is a port. Each step the verifier runs one forward over

    [root] + draft tree (pool[root], <= G n-grams of N-1 tokens) + lookahead branch (the window)

Draft and window never see each other. The draft tree is verified as usual; the window is one
Jacobi iteration: the argmax of its last level becomes a new level, every column of the window
then holds an N-gram (harvested into the pool) and the window shifts.

Layout for W=5, N=4, G=2 (r = root at offset 0; offset = position id - root's position id):

    query:   r | g00 g01 g02 g10 g11 g12 | a0 a1 a2 a3 | b0 b1 b2 b3 b4 | c0 c1 c2 c3 c4
    offset:  0 |  1   2   3   1   2   3  |  1  2  3  4 |  1  2  3  4  5 |  2  3  4  5  6
                 draft tree (verified)     level 0       level 1          level 2 (last)

    The window drawn by offset; column c is a diagonal (key, then one token per level):

    offset:   1   2   3   4   5   6   7
    level 0:  a0  a1  a2  a3                     oldest guesses, causal among themselves
    level 1:  b0  b1  b2  b3  b4                 b_c sees r a0..a(c-1) and itself
    level 2:      c0  c1  c2  c3  c4             c_c sees r a0..a(c-1) b_c and itself
    argmax:           n0  n1  n2  n3  n4         output rows = level 2; n_c is predicted at c_c

    Branch mask (x = may attend; every row also sees r and the KV cache, the verifier adds that):

         a0 a1 a2 a3 b0 b1 b2 b3 b4 c0 c1 c2 c3 c4
    a0   x  .  .  .  .  .  .  .  .  .  .  .  .  .
    a1   x  x  .  .  .  .  .  .  .  .  .  .  .  .
    a2   x  x  x  .  .  .  .  .  .  .  .  .  .  .
    a3   x  x  x  x  .  .  .  .  .  .  .  .  .  .
    b0   .  .  .  .  x  .  .  .  .  .  .  .  .  .
    b1   x  .  .  .  .  x  .  .  .  .  .  .  .  .
    b2   x  x  .  .  .  .  x  .  .  .  .  .  .  .
    b3   x  x  x  .  .  .  .  x  .  .  .  .  .  .
    b4   x  x  x  x  .  .  .  .  x  .  .  .  .  .
    c0   .  .  .  .  x  .  .  .  .  x  .  .  .  .
    c1   x  .  .  .  .  x  .  .  .  .  x  .  .  .
    c2   x  x  .  .  .  .  x  .  .  .  .  x  .  .
    c3   x  x  x  .  .  .  .  x  .  .  .  .  x  .
    c4   x  x  x  x  .  .  .  .  x  .  .  .  .  x

    Harvest, column c: key = r (c = 0) or a(c-1); n-gram = (b_c, c_c, n_c) at offsets c+1..c+3.
    Query size = 1 + G(N-1) + (W-1) + (N-2)W = (N-1)(W+G) = 21 here.

Warm-up (the first N-2 steps that run the window; the pool's prompt n-grams are drafted
meanwhile): level 0 starts as W+N-3 random prompt tokens and each step adds one level from the
argmax of the newest one until N-1 levels exist. The rule that places every level, during
warm-up and after, is offset(level l, column c) = max(l, 1) + c.

Whether to run the window at all is measured, not assumed: an ArmSelector compares tokens per
unit of forward cost with and without it, over all of the drafter's requests (ArmStats). On a
machine where verifying 15 more rows costs 50-80 % more (this 2-core CPU) the window rarely pays;
on an accelerator, where extra rows are nearly free, it does.

Multi-token steps: when k > 1 tokens are committed, the root moves k positions but the window
moves one column, as in LADE (ALWAYS_FWD_ONE), so its guesses land k-1 positions left of where
they were made. Shifting by k instead (LADE's other mode: drop k columns, refill the freed ones
with random prompt tokens) keeps positions aligned and wins on a "model" that is a function of
position, but loses on a real LLM: a fresh random column needs N-2 steps before its n-grams are
worth anything and meanwhile pushes good ones out of the LRU pool, while a misaligned column is
still a coherent chain whose n-grams are keyed by content, not position. Measured with greedy
SmolLM2-135M (bf16, 33 HumanEval + chat prompts, 96 new tokens, N=4 W=5 G=5), tokens per step:
one column 1.98, k columns 1.90, k columns with the passed ones recycled to the right 1.94.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ConfigError
from .ngram_pool import NgramPool
from .policy import ArmSelector, ArmStats, DraftSizer, window_prior
from .proposer import DEFAULT_CONTEXT, LookaheadBranch, Proposal, StepContext
from .tree import DraftTree

_RANGES = {"level": (3, 16), "window": (1, 16), "guess_set_size": (1, 16)}


@dataclass(frozen=True)
class LookaheadParams:
    level: int = 4
    """N: n-gram size; the window keeps N-1 levels and a step commits at most N tokens."""
    window: int = 5
    """W: columns of the Jacobi window = future positions guessed = n-grams harvested per step."""
    guess_set_size: int = 5
    """G: most n-grams kept per key in the pool, and so most candidates verified per step."""

    @property
    def query_tokens(self) -> int:
        """Query tokens per steady-state step with a full pool: (N-1)(W+G), root included."""
        return (self.level - 1) * (self.window + self.guess_set_size)

    def validate(self, speculation_gamma: int | None = None) -> "LookaheadParams":
        for f in fields(self):
            lo, hi = _RANGES[f.name]
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ConfigError(f"lookahead.{f.name} must be an integer in [{lo}, {hi}], got "
                                  f"{value!r}; set it within that range (default {f.default})")
        if speculation_gamma is not None and speculation_gamma < self.query_tokens:
            raise ConfigError(
                f"speculation_gamma must be >= (level-1)*(window+guess_set_size) = {self.query_tokens} "
                f"for lookahead level={self.level}, window={self.window}, "
                f"guess_set_size={self.guess_set_size}, got {speculation_gamma}; raise "
                f"speculation_gamma to {self.query_tokens} or lower level/window/guess_set_size")
        return self

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LookaheadParams":
        """Params from a config mapping (MindIE plugin keys); unknown keys warn, bad values raise."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"lookahead params must be a mapping like {{'level': 4, 'window': 5, "
                              f"'guess_set_size': 5}}, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            warnings.warn(f"lookahead: ignoring unknown key(s) {', '.join(map(str, unknown))}; "
                          f"known keys are {', '.join(sorted(known))}", stacklevel=2)
        return cls(**{k: v for k, v in d.items() if k in known}).validate()


# ----------------------------------------------------------------------------------- layout

@dataclass(frozen=True)
class WindowLayout:
    offsets: tuple[int, ...]     # per branch row: position id minus the root's
    mask: np.ndarray             # [n, n] bool, read-only; root column implicit
    output_rows: tuple[int, ...]  # rows whose argmax becomes the next level


@lru_cache(maxsize=256)
def window_layout(len0: int, num_upper: int, skip_first_output: bool = False) -> WindowLayout:
    """Offsets, mask and output rows of a window with `len0` level-0 tokens and `num_upper`
    levels of len0 + 1 tokens each (the diagram above is len0=4, num_upper=2).

    Level 0 column c sits at offset 1+c and is causal; level l>=1 column c sits at offset l+c and
    sees level 0 columns < c plus column c of levels 1..l: exactly one token at each offset
    0..l+c, so every row is a valid causal context. Output rows are the newest level's (level 0's
    at the first warm-up step); later warm-up steps skip its first column, whose argmax would sit
    left of the next level's first column."""
    width = len0 + 1
    n = len0 + num_upper * width
    offsets = list(range(1, len0 + 1))
    mask = np.zeros((n, n), dtype=bool)
    mask[:len0, :len0] = np.tril(np.ones((len0, len0), dtype=bool))
    cols = np.arange(width)
    for lv in range(1, num_upper + 1):
        start = len0 + (lv - 1) * width
        rows = start + cols
        offsets.extend(range(lv, lv + width))
        mask[start:start + width, :len0] = np.tri(width, len0, -1, dtype=bool)
        for below in range(1, lv + 1):
            mask[rows, len0 + (below - 1) * width + cols] = True
    mask.flags.writeable = False
    out_start = len0 + (num_upper - 1) * width if num_upper else 0
    out_start += 1 if skip_first_output and num_upper else 0
    return WindowLayout(tuple(offsets), mask, tuple(range(out_start, n)))


# ----------------------------------------------------------------------------------- drafter

@dataclass
class _Pending:
    """What `propose` handed out, read back by `observe`."""
    root: int
    width: int                       # window columns in the branch (0 = no branch)
    num_outputs: int
    cost: float = 1.0                # forward cost of the step's query (root + draft + branch)
    arm: int = -1                    # the selector's arm, -1 during warm-up


@dataclass
class _RequestState:
    pool: NgramPool
    rng: np.random.Generator
    fill_tokens: np.ndarray          # EOS-free prompt tokens; the window's random guesses
    levels: list[list[int]]          # levels[0] = oldest guesses; warm when N-1 levels exist
    sizer: DraftSizer
    width: int                       # window columns to run (<= W); 0 = no lookahead branch
    fed: int = 0                     # context tokens whose n-grams are in the pool
    pending: _Pending | None = None
    expected: float = 0.0            # the sizer's expected accepted tokens of the last draft
    candidates: list[tuple[int, ...]] = field(default_factory=list)  # the pool's, last step
    # arm 0 runs the window, arm 1 only verifies pool candidates: whichever gives more tokens
    # per unit of forward cost (the window's rows are not free on every machine)
    selector: ArmSelector | None = None


class LookaheadDrafter:
    """Proposer: draft tree from the n-gram pool + the Jacobi window as a lookahead branch."""

    name = "lookahead"
    trie = None

    def __init__(self, params: LookaheadParams | None = None, eos_token_ids: Iterable[int] = (),
                 default_seed: int = 0, adaptive_window: bool = True, arms: ArmStats | None = None):
        self.params = (params or LookaheadParams()).validate()
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.default_seed = default_seed
        self.adaptive_window = adaptive_window   # False: always run the window (LADE, MindIE)
        self._requests: dict[str, _RequestState] = {}
        # window or not: learnt across this configuration's requests (the engine's, when built
        # by the registry, so the evidence outlives this drafter)
        self.arms = arms if arms is not None else ArmStats(2)
        self._sizes = DraftSizer.prior(self.params.guess_set_size, self.params.level - 1)

    # -- Proposer protocol

    def begin(self, request_id: str, prompt: Sequence[int], seed: int | None = None,
              ctx: StepContext = DEFAULT_CONTEXT) -> None:
        p = self.params
        if self.adaptive_window:
            # arm 0 runs the window: before evidence it is priced by the cost curve against
            # about one token per unit cost without it, so on a machine where its rows are dear
            # the pool-only arm is tried first and the window waits (policy.window_prior)
            self.arms.suppose(0, window_prior(ctx.cost, (p.level - 1) * p.window - 1))
        prompt = [int(t) for t in prompt]
        pool = NgramPool(p.level - 1, p.guess_set_size, self.eos_token_ids)
        pool.add_sequence(prompt)
        fill = np.array([t for t in prompt if t not in self.eos_token_ids], dtype=np.int64)
        if fill.size == 0:  # nothing to copy guesses from: any non-EOS id will do
            fill = np.array([min(set(range(len(self.eos_token_ids) + 1)) - self.eos_token_ids)])
        st = _RequestState(pool=pool, rng=np.random.default_rng(self.default_seed if seed is None else seed),
                           fill_tokens=fill, levels=[], width=p.window, fed=len(prompt),
                           sizer=DraftSizer(p.guess_set_size, p.level - 1, self._sizes),
                           selector=ArmSelector(2, shared=self.arms))
        st.levels = [self._fill(st, p.window + p.level - 3)]
        self._requests[request_id] = st

    def propose(self, request_id: str, context: Sequence[int], max_nodes: int,
                ctx: StepContext = DEFAULT_CONTEXT) -> Proposal:
        st = self._state(request_id)
        if len(context) == 0:
            raise ValueError("LookaheadDrafter.propose: empty context (the root is its last token)")
        root = int(context[-1])
        self._feed(st, context)
        warm = self.warm(request_id)
        draft = self._draft(st, context, max_nodes, ctx)
        arm = st.selector.choose() if self.adaptive_window else 0
        width = 0 if arm == 1 else st.width
        branch = self._branch(st, warm, width)
        rows = 1 + len(draft) + (len(branch.tokens) if branch else 0)
        # warm-up steps are not scored: the window has nothing to harvest yet
        st.pending = _Pending(root, width if branch else 0,
                              len(branch.output_rows) if branch else 0, ctx.cost(rows),
                              arm if self.adaptive_window and (warm or not branch) else -1)
        return Proposal(draft=draft, lookahead=branch, expected=st.expected if draft else 0.0)

    def observe(self, request_id: str, committed: Sequence[int],
                lookahead_argmax: Sequence[int] | None = None) -> None:
        st = self._state(request_id)
        pend, st.pending = st.pending, None
        k = len(committed)
        if k == 0:
            return
        if pend is None:  # a step without a proposal (no draft budget left)
            self._shift(st, None)
            return
        new = None
        if pend.width and lookahead_argmax is not None:
            if len(lookahead_argmax) != pend.num_outputs:
                raise ValueError(f"LookaheadDrafter.observe: got {len(lookahead_argmax)} argmax "
                                 f"values for {pend.num_outputs} output rows")
            new = [int(t) for t in lookahead_argmax]
            if len(st.levels) == self.params.level - 1:
                self._harvest(st, pend.root, new, pend.width)
        if pend.arm >= 0:
            st.selector.update(k, pend.cost)
        self._shift(st, new)

    def end(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    # -- knobs for the engine / scheduler

    def set_window(self, request_id: str, width: int) -> None:
        """Run only the first `width` (0..W) window columns from the next step on: the branch
        shrinks to (N-1)*width - 1 tokens, 0 drops it (no Jacobi, the pool then only learns from
        prompt and output). Warm-up always runs full width; width 0 pauses it."""
        if not 0 <= width <= self.params.window:
            raise ValueError(f"set_window: width must be in [0, {self.params.window}], got {width}")
        self._state(request_id).width = width

    def warm(self, request_id: str) -> bool:
        """Whether the window has its N-1 levels (warm-up runs only while the window is on)."""
        return len(self._state(request_id).levels) == self.params.level - 1

    def skip(self, request_id: str, context: Sequence[int]) -> None:
        """A step this drafter sits out (hybrid, while the trie's tree suffices): nothing is
        proposed or observed; the pool catches up on the tokens at the next propose, and the
        sizer must not take the jump in context length for a hit."""
        self._state(request_id).sizer.skipped(len(context))

    def candidates(self, request_id: str) -> list[tuple[int, ...]]:
        """The pool's n-grams for the last proposed root, most recent first (drafted or not)."""
        return self._state(request_id).candidates

    def pool(self, request_id: str) -> NgramPool:
        return self._state(request_id).pool

    def acceptance(self, request_id: str) -> float:
        """Expected accepted draft tokens of the newest candidate at full depth, as learnt."""
        return self._state(request_id).sizer.expected(1, self.params.level - 1)

    # -- internals

    def _state(self, request_id: str) -> _RequestState:
        try:
            return self._requests[request_id]
        except KeyError:
            raise KeyError(f"LookaheadDrafter: unknown request {request_id!r} (call begin first)") from None

    def _fill(self, st: _RequestState, n: int) -> list[int]:
        return st.fill_tokens[st.rng.integers(0, st.fill_tokens.size, size=n)].tolist()

    def _feed(self, st: _RequestState, context: Sequence[int]) -> None:
        """Put the n-grams that end in tokens committed since the last call into the pool."""
        n = len(context)
        if n > st.fed:
            st.pool.add_sequence(context[max(0, st.fed - self.params.level + 1):n])
        st.fed = n

    def _draft(self, st: _RequestState, context: Sequence[int], max_nodes: int, ctx: StepContext) -> DraftTree:
        st.sizer.observe(context)
        candidates = st.candidates = st.pool.candidates(int(context[-1]))
        st.sizer.record(len(context), candidates)
        if not candidates or max_nodes <= 0:
            return DraftTree()
        count, depth = st.sizer.choose(candidates, ctx.cost, max_nodes)
        if count == 0:
            return DraftTree()
        st.expected = st.sizer.expected(count, depth)
        return DraftTree.from_paths([list(c[:depth]) for c in candidates[:count]])

    def _branch(self, st: _RequestState, warm: bool, width: int) -> LookaheadBranch | None:
        if width == 0:
            return None
        levels = st.levels
        if warm:
            row0, upper = levels[0][:width - 1], [lv[:width] for lv in levels[1:]]
        else:
            row0, upper = levels[0], levels[1:]
        layout = window_layout(len(row0), len(upper), skip_first_output=not warm)
        tokens = row0 + [t for lv in upper for t in lv]
        return LookaheadBranch(tokens, list(layout.offsets), layout.mask, list(layout.output_rows))

    def _harvest(self, st: _RequestState, root: int, new: list[int], width: int) -> None:
        """Column c of the window is one N-gram: (key; levels 1..N-2 at c, new[c])."""
        keys = [root] + st.levels[0][:width - 1]
        add = st.pool.add
        for key, ngram in zip(keys, zip(*(lv[:width] for lv in st.levels[1:]), new)):
            add(key, ngram)

    def _shift(self, st: _RequestState, new: list[int] | None) -> None:
        """Slide the window one column to the new root and add `new` as its newest level.

        One column whatever the number of tokens committed, as LADE (ALWAYS_FWD_ONE): see the
        module docstring for why not k columns. Once warm, level 0 retires and level 1 minus its
        first column (that column's key is the root) takes its place; during warm-up every level
        just loses its first column. Missing tokens (a narrowed window, no Jacobi step) are random
        prompt tokens."""
        levels = st.levels
        if new is None:
            st.levels = [lv[1:] + self._fill(st, min(1, len(lv))) for lv in levels]
            return
        if len(levels) == self.params.level - 1:
            levels = [levels[1][1:]] + levels[2:]
        else:
            levels = [lv[1:] for lv in levels]
        size = len(levels[0]) + 1
        top = new[:size]
        if len(top) < size:
            top += self._fill(st, size - len(top))
        if self.eos_token_ids:
            # NOTE: an EOS guess would make its column draft "end here"; LADE swaps them out too.
            top = [self._fill(st, 1)[0] if t in self.eos_token_ids else t for t in top]
        st.levels = levels + [top]
