"""Lookahead decoding's per-request state: the n-gram pool and the Jacobi window (lookahead.py
describes the algorithm and draws the window's layout). `PoolSource` feeds the pool from prompt,
output and the window's columns, lays out the window's branch each step, harvests its columns'
n-grams from the argmax of its last level and shifts it; lookahead and hybrid drafters draft
from it through the draft policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .ngram_pool import NgramPool
from ..contract.proposer import LookaheadBranch
from ..contract.tree import DraftTree

# ----------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class WindowLayout:
    offsets: tuple[int, ...]  # per branch row: position id minus the root's
    mask: np.ndarray  # [n, n] bool, read-only; root column implicit
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
        mask[start : start + width, :len0] = np.tri(width, len0, -1, dtype=bool)
        for below in range(1, lv + 1):
            mask[rows, len0 + (below - 1) * width + cols] = True
    mask.flags.writeable = False
    out_start = len0 + (num_upper - 1) * width if num_upper else 0
    out_start += 1 if skip_first_output and num_upper else 0
    return WindowLayout(tuple(offsets), mask, tuple(range(out_start, n)))


# ----------------------------------------------------------------------------------- sources

# A pool candidate's own estimate, before evidence: its first token is accepted with chance
# PRIOR_FIRST, each further one (given the one before) with PRIOR_NEXT, an older candidate
# RANK_DECAY times as likely as the one before it. The policy calibrates these by depth and band.
PRIOR_FIRST, PRIOR_NEXT, RANK_DECAY = 0.3, 0.6, 0.8


def pool_tree(candidates: Sequence[tuple[int, ...]]) -> DraftTree:
    """The pool's candidates (most recent first) as one tree with their prior estimates; a prefix
    several share keeps the highest."""
    tree = DraftTree()
    index: dict[tuple[int, int], int] = {}
    for rank, cand in enumerate(candidates):
        parent, p = -1, PRIOR_FIRST * RANK_DECAY**rank
        for tok in cand:
            node = index.get((parent, tok))
            if node is None:
                node = index[(parent, tok)] = tree.add(tok, parent, p)
            elif p > tree.probs[node]:
                tree.probs[node] = p
            parent, p = node, p * PRIOR_NEXT
    return tree


@dataclass
class _Window:
    """What a step's window handed out, read back by `observe`."""

    root: int
    width: int  # window columns in the branch (0 = no branch)
    num_outputs: int


@dataclass
class _RequestState:
    pool: NgramPool
    rng: np.random.Generator
    fill_tokens: np.ndarray  # EOS-free prompt tokens; the window's random guesses
    levels: list[list[int]]  # levels[0] = oldest guesses; warm when N-1 levels exist
    fed: int = 0  # context tokens whose n-grams are in the pool
    window: _Window | None = None
    candidates: list[tuple[int, ...]] = field(default_factory=list)  # the pool's, last step


class PoolSource:
    """Lookahead's candidates and window, per request: the n-gram pool (fed by prompt, output
    and the window's columns) and the Jacobi window's levels. params: LookaheadParams."""

    def __init__(self, params, eos_token_ids: Iterable[int] = (), default_seed: int = 0):
        self.params = params
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.default_seed = default_seed
        self._requests: dict[str, _RequestState] = {}

    def begin(self, request_id: str, prompt: Sequence[int], seed: int | None = None) -> None:
        p = self.params
        prompt = [int(t) for t in prompt]
        pool = NgramPool(p.level - 1, p.guess_set_size, self.eos_token_ids)
        pool.add_sequence(prompt)
        fill = np.array([t for t in prompt if t not in self.eos_token_ids], dtype=np.int64)
        if fill.size == 0:  # nothing to copy guesses from: any non-EOS id will do
            fill = np.array([min(set(range(len(self.eos_token_ids) + 1)) - self.eos_token_ids)])
        st = _RequestState(
            pool=pool,
            rng=np.random.default_rng(self.default_seed if seed is None else seed),
            fill_tokens=fill,
            levels=[],
            fed=len(prompt),
        )
        st.levels = [self._fill(st, p.window + p.level - 3)]
        self._requests[request_id] = st

    def step(
        self, request_id: str, context: Sequence[int], width: int
    ) -> tuple[DraftTree, LookaheadBranch | None]:
        """This step's pool candidates below the root context[-1] (a tree with prior estimates),
        and the window's branch with its first `width` columns (0..W; None for no window)."""
        st = self._state(request_id)
        if len(context) == 0:
            raise ValueError("lookahead: empty context (the root is its last token)")
        root = int(context[-1])
        self._feed(st, context)
        st.candidates = st.pool.candidates(root)
        if not 0 <= width <= self.params.window:
            raise ValueError(
                f"lookahead window width must be in [0, {self.params.window}], got {width}"
            )
        branch = self._branch(st, self.warm(request_id), width) if width else None
        st.window = _Window(root, width if branch else 0, len(branch.output_rows) if branch else 0)
        return pool_tree(st.candidates), branch

    def observe(
        self,
        request_id: str,
        committed: Sequence[int],
        lookahead_argmax: Sequence[int] | None = None,
    ) -> None:
        st = self._state(request_id)
        win, st.window = st.window, None
        if not committed:
            return
        if win is None:  # a step without a proposal (no draft budget left, or sat out)
            self._shift(st, None)
            return
        new = None
        if win.width and lookahead_argmax is not None:
            if len(lookahead_argmax) != win.num_outputs:
                raise ValueError(
                    f"lookahead: got {len(lookahead_argmax)} argmax values for "
                    f"{win.num_outputs} output rows"
                )
            new = [int(t) for t in lookahead_argmax]
            if len(st.levels) == self.params.level - 1:
                self._harvest(st, win.root, new, win.width)
        self._shift(st, new)

    def end(self, request_id: str) -> None:
        self._requests.pop(request_id, None)

    def warm(self, request_id: str) -> bool:
        """Whether the window has its N-1 levels (warm-up runs only while the window is on)."""
        return len(self._state(request_id).levels) == self.params.level - 1

    def candidates(self, request_id: str) -> list[tuple[int, ...]]:
        """The pool's n-grams for the last root, most recent first (drafted or not)."""
        return self._state(request_id).candidates

    def pool(self, request_id: str) -> NgramPool:
        return self._state(request_id).pool

    # -- internals

    def _state(self, request_id: str) -> _RequestState:
        try:
            return self._requests[request_id]
        except KeyError:
            raise KeyError(
                f"lookahead: unknown request {request_id!r} (call begin first)"
            ) from None

    def _fill(self, st: _RequestState, n: int) -> list[int]:
        return st.fill_tokens[st.rng.integers(0, st.fill_tokens.size, size=n)].tolist()

    def _feed(self, st: _RequestState, context: Sequence[int]) -> None:
        """Put the n-grams that end in tokens committed since the last call into the pool."""
        n = len(context)
        if n > st.fed:
            st.pool.add_sequence(context[max(0, st.fed - self.params.level + 1) : n])
        st.fed = n

    def _branch(self, st: _RequestState, warm: bool, width: int) -> LookaheadBranch | None:
        if width == 0:
            return None
        levels = st.levels
        if warm:
            row0, upper = levels[0][: width - 1], [lv[:width] for lv in levels[1:]]
        else:
            row0, upper = levels[0], levels[1:]
        layout = window_layout(len(row0), len(upper), skip_first_output=not warm)
        tokens = row0 + [t for lv in upper for t in lv]
        return LookaheadBranch(tokens, list(layout.offsets), layout.mask, list(layout.output_rows))

    def _harvest(self, st: _RequestState, root: int, new: list[int], width: int) -> None:
        """Column c of the window is one N-gram: (key; levels 1..N-2 at c, new[c])."""
        keys = [root] + st.levels[0][: width - 1]
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
