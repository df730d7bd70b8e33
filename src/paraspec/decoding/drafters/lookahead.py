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
unit of forward cost with and without it, over all of the drafter's requests (ArmStats). Where
verifying 15 more rows costs 50-80 % more (a 2-core CPU) the window rarely pays; on an
accelerator, where extra rows are nearly free, it does. Which pool candidates to verify, and how
deep, is the draft policy's call (draft_policy.py), from their measured acceptance by depth and
rank.

Multi-token steps: when k > 1 tokens are committed, the root moves k positions but the window
moves one column, as in LADE (ALWAYS_FWD_ONE), so its guesses land k-1 positions left of where
they were made. Shifting by k instead (LADE's other mode: drop k columns, refill the freed ones
with random prompt tokens) keeps positions aligned and wins on a "model" that is a function of
position, but loses on a real LLM: a fresh random column needs N-2 steps before its n-grams are
worth anything and meanwhile pushes good ones out of the LRU pool, while a misaligned column is
still a coherent chain whose n-grams are keyed by content, not position (measured:
docs/design-notes.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ...errors import ConfigError
from .arms import ArmSelector, ArmStats
from .unknown_keys import warn_unknown_keys
from ..policy.cost import window_prior
from ..policy.calibration import PolicyStats
from ..policy.draft_policy import DraftPolicy
from .lookahead_source import PoolSource, WindowLayout, pool_tree, window_layout  # noqa: F401  (re-exported)
from .ngram_pool import NgramPool
from ..contract.proposer import DEFAULT_CONTEXT, Proposal, StepContext

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
                raise ConfigError(
                    f"lookahead.{f.name} must be an integer in [{lo}, {hi}], got "
                    f"{value!r}; set it within that range (default {f.default})"
                )
        if speculation_gamma is not None and speculation_gamma < self.query_tokens:
            raise ConfigError(
                f"speculation_gamma must be >= (level-1)*(window+guess_set_size) = {self.query_tokens} "
                f"for lookahead level={self.level}, window={self.window}, "
                f"guess_set_size={self.guess_set_size}, got {speculation_gamma}; raise "
                f"speculation_gamma to {self.query_tokens} or lower level/window/guess_set_size"
            )
        return self

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LookaheadParams":
        """Params from a config mapping (MindIE plugin keys); unknown keys warn, bad values raise."""
        if not isinstance(d, Mapping):
            raise ConfigError(
                f"lookahead params must be a mapping like {{'level': 4, 'window': 5, "
                f"'guess_set_size': 5}}, got {type(d).__name__}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            warn_unknown_keys("lookahead", unknown, known)
        return cls(**{k: v for k, v in d.items() if k in known}).validate()


class LookaheadDrafter:
    """The lookahead Proposer: pool candidates sized by the draft policy, plus the Jacobi window
    as a lookahead branch where it pays (arm 0 runs the window, arm 1 only verifies pool
    candidates: whichever gives more tokens per unit of forward cost)."""

    name = "lookahead"
    trie = None

    def __init__(
        self,
        params: LookaheadParams | None = None,
        eos_token_ids: Iterable[int] = (),
        default_seed: int = 0,
        adaptive_window: bool = True,
        arms: ArmStats | None = None,
        stats: PolicyStats | None = None,
    ):
        self.params = (params or LookaheadParams()).validate()
        self.source = PoolSource(self.params, eos_token_ids, default_seed)
        self.adaptive_window = adaptive_window  # False: always run the window (LADE, MindIE)
        # window or not: learnt across this configuration's requests (the engine's, when built
        # by the registry, so the evidence outlives this drafter)
        self.arms = arms if arms is not None else ArmStats(2)
        self.policy = DraftPolicy(1, stats)
        self._selectors: dict[str, ArmSelector] = {}
        # the step's cost and scored arm (-1: none)
        self._pending: dict[str, tuple[float, int]] = {}

    def begin(
        self,
        request_id: str,
        prompt: Sequence[int],
        seed: int | None = None,
        ctx: StepContext = DEFAULT_CONTEXT,
        identity: bytes | None = b"",
    ) -> None:
        p = self.params
        if self.adaptive_window:
            # arm 0 runs the window: before evidence it is priced by the cost curve against
            # about one token per unit cost without it, so on a machine where its rows are dear
            # the pool-only arm is tried first and the window waits (cost.window_prior)
            self.arms.suppose(0, window_prior(ctx.cost, (p.level - 1) * p.window - 1))
        self.source.begin(request_id, prompt, seed)
        self.policy.begin(request_id)
        self._selectors[request_id] = ArmSelector(2, shared=self.arms)

    def propose(
        self,
        request_id: str,
        context: Sequence[int],
        max_nodes: int,
        ctx: StepContext = DEFAULT_CONTEXT,
    ) -> Proposal:
        warm = self.source.warm(request_id) if context else False
        arm = self._selectors[request_id].choose() if self.adaptive_window else 0
        tree, branch = self.source.step(request_id, context, 0 if arm == 1 else self.params.window)
        window_rows = len(branch.tokens) if branch else 0
        draft, expected = self.policy.select(
            request_id, context, [tree], max_nodes, ctx.cost, window_rows
        )
        # warm-up steps are not scored: the window has nothing to harvest yet
        scored = arm if self.adaptive_window and (warm or not branch) else -1
        self._pending[request_id] = (ctx.cost(1 + len(draft) + window_rows), scored)
        return Proposal(
            draft=draft, lookahead=branch, expected=expected, reason=self.policy.reason(request_id)
        )

    def observe(
        self,
        request_id: str,
        committed: Sequence[int],
        lookahead_argmax: Sequence[int] | None = None,
    ) -> None:
        if not committed:
            return
        self.policy.observe(request_id, committed)
        cost, arm = self._pending.pop(request_id, (1.0, -1))
        if arm >= 0:
            self._selectors[request_id].update(len(committed), cost)
        self.source.observe(request_id, committed, lookahead_argmax)

    def end(self, request_id: str) -> None:
        self.source.end(request_id)
        self.policy.end(request_id)
        self._selectors.pop(request_id, None)
        self._pending.pop(request_id, None)

    def warm(self, request_id: str) -> bool:
        return self.source.warm(request_id)

    def candidates(self, request_id: str) -> list[tuple[int, ...]]:
        return self.source.candidates(request_id)

    def pool(self, request_id: str) -> NgramPool:
        return self.source.pool(request_id)
