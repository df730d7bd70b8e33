"""hybrid: memory_decoding's trie drafts and lookahead's n-gram candidates in ONE draft tree.

MindIE refuses to enable both algorithms at once; here they share one budget. Each step:
- the trie drafts first (memory_decoding weighs its draft against the forward cost). When its
  tree fills its stair of the cost curve (the forward pads its rows, so k rows cost what the
  next multiple of 4 does), lookahead stays idle: it could only add rows that cost a step up,
  for candidates the trie mostly holds already (without the Jacobi window the pool's n-grams
  come from the same prompt and output), and its Python work would be pure overhead;
- otherwise lookahead proposes too (its own draft, sized against the forward cost, and the
  Jacobi window when it runs), and its pool candidates fill the rows up to the top of the
  stair, which the forward computes anyway; a TreeChooser decides whether to verify the trie's
  tree so filled or merged with lookahead's draft (beyond the stair), from the trie's own
  estimate of its accepted tokens, calibrated counterfactually (every candidate tree is scored
  against the tokens committed after it, whichever was verified). Where the trie finds
  nothing, lookahead's draft goes alone: its sizer has judged that a few cheap candidates beat
  plain decoding (novel text);
- the Jacobi window rides along only when it pays: it is considered only while the trie's drafts
  are accepted less than WINDOW_BELOW tokens a step (where the trie does well, a window adds
  rows and nothing else), and then an ArmSelector compares tokens per unit of forward cost with
  and without it, learning across the engine's requests (warm-up steps are not scored). The
  comparison is paired: in a step with the window, the trie's own tree was verified too, so
  the tokens and cost of the same step without the window are known. Before any evidence the
  window is supposed to add policy.WINDOW_PRIOR_GAIN tokens per step, priced by the cost curve: where
  its rows are nearly free it runs at once; where they cost 1.5-1.8x a step (this CPU) it waits
  as a loser would, instead of costing an engine's first request its exploration.
  Batches > 2 never carry it: verification stops being free as the batch grows.
- lookahead's work is measured too: what its nodes add to the trie's accepted tokens, over the
  steps it ran (no window). Where that stays under LA_MIN_GAIN a step, it sits out as above and
  runs on one eligible step in LA_PROBE_EVERY to keep measuring (on this CPU's test sets it adds
  0.01-0.03 tokens a step, about what its Python work costs).
After verification the drafters that proposed observe the committed tokens.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from .lookahead import LookaheadDrafter, LookaheadParams
from .memory import MemoryDecodingParams, MemoryDrafter
from .policy import ArmSelector, ArmStats, CostModel, TreeChooser, window_prior
from .proposer import DEFAULT_CONTEXT, Proposal, StepContext
from .trie import TokenTrie
from .tree import DraftTree

_MEMORY_KEYS = {f.name for f in fields(MemoryDecodingParams)} - {"plugin_type"}
_LOOKAHEAD_KEYS = {f.name for f in fields(LookaheadParams)}
MAX_WINDOW_BATCH = 2
WINDOW_BELOW = 1.0   # accepted trie draft tokens per step under which the window is considered
# Lookahead's Python work on a step (~0.1-0.15 ms here, ~1 % of a 135M model's step) is worth
# it only if its nodes add at least this many accepted tokens a step on top of the trie's; below
# that it sits out, and runs one eligible step in LA_PROBE_EVERY to keep measuring.
LA_MIN_GAIN = 0.02
LA_PROBE_EVERY = 8
LA_GAIN_ALPHA = 0.02


@dataclass(frozen=True)
class HybridParams:
    memory: MemoryDecodingParams = field(default_factory=lambda: MemoryDecodingParams(dynamic_algo=True))
    lookahead: LookaheadParams = field(default_factory=LookaheadParams)

    @property
    def decoding_length(self) -> int:
        """Root + merged draft nodes per step (memory_decoding's decoding_length)."""
        return self.memory.decoding_length

    @property
    def query_tokens(self) -> int:
        """Most query rows a step can use: root + drafts + a full Jacobi window."""
        p = self.lookahead
        return self.decoding_length + (p.level - 1) * p.window - 1

    def validate(self, speculation_gamma: int | None = None) -> "HybridParams":
        self.memory.validate(None)
        self.lookahead.validate(None)
        if speculation_gamma is not None and speculation_gamma < self.query_tokens:
            raise ConfigError(f"speculation_gamma={speculation_gamma} is below the hybrid's need of "
                              f"decoding_length + (level-1)*window - 1 = {self.query_tokens}; raise "
                              "speculation_gamma or lower decoding_length/level/window")
        return self

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HybridParams":
        """One flat dict, as MindIE-style plugin_params: memory_decoding keys (decoding_length,
        dynamic_algo, mode, ...) and lookahead keys (level, window, guess_set_size)."""
        unknown = sorted(set(d) - _MEMORY_KEYS - _LOOKAHEAD_KEYS - {"plugin_type"})
        if unknown:
            warnings.warn(f"plugin_params: unknown key(s) {', '.join(unknown)} for hybrid are ignored",
                          stacklevel=2)
        # the trie's part sizes its drafts (dynamic_algo) unless told otherwise: a fixed-length
        # draft pays its rows even where the chooser would rather take lookahead's cheap one
        memory = MemoryDecodingParams.from_dict({"dynamic_algo": True} | {k: v for k, v in d.items() if k in _MEMORY_KEYS})
        lookahead = LookaheadParams.from_dict({k: v for k, v in d.items() if k in _LOOKAHEAD_KEYS})
        return cls(memory, lookahead)


@dataclass
class _Request:
    selector: ArmSelector                     # arm 1 = with the window
    chooser: TreeChooser                      # the trie's tree, lookahead's, or both merged
    memory_tree: DraftTree | None = None
    memory_score: float = 1.0     # accepted draft tokens per step along the trie's tree
    rows: int = 0
    cost: float = 1.0             # the step's forward cost (all its rows)
    memory_cost: float = 1.0      # what the trie's tree alone would have cost
    arm: int = 0
    choosing: bool = False        # this step's arm came from the selector (so it learns from it)
    scored: bool = False          # ... and counts (not a window warm-up step)
    lookahead_ran: bool = False   # lookahead proposed this step (so it observes it)


def _paths(tree: DraftTree) -> list[list[int]]:
    """Root-to-leaf token paths, leaves in node order (a tree's best-first order survives)."""
    has_child = set(p for p in tree.parents if p >= 0)
    return [[tree.tokens[n] for n in tree.path_to(leaf)] for leaf in range(len(tree)) if leaf not in has_child]


def _breadth_first(candidates: Sequence[Sequence[int]]) -> list[Sequence[int]]:
    """Candidates' prefixes, shallowest first: every candidate's first token before any second
    one (filling a few free rows, a new first token is likelier to be accepted than a 3rd)."""
    depth = max((len(c) for c in candidates), default=0)
    return [c[:d] for d in range(1, depth + 1) for c in candidates if len(c) >= d]


class HybridDrafter:
    name = "hybrid"

    def __init__(self, params: HybridParams | None = None, trie: TokenTrie | None = None,
                 eos_token_ids: Iterable[int] = (), arms: ArmStats | None = None):
        self.params = (params or HybridParams()).validate()
        self.memory = MemoryDrafter(self.params.memory, eos_token_ids=eos_token_ids, trie=trie)
        self.lookahead = LookaheadDrafter(self.params.lookahead, eos_token_ids=eos_token_ids,
                                          adaptive_window=False)
        self.trie = self.memory.trie
        # window or not: learnt across this configuration's requests
        self.arms = arms if arms is not None else ArmStats(2)
        self._trees = TreeChooser.prior(2)
        # accepted tokens a step lookahead's nodes added to the trie's, over the steps it ran
        # (all requests): optimistic at first, so it is measured before it can sit out
        self.lookahead_gain = 0.1
        self._eligible = 0
        self._requests: dict[str, _Request] = {}

    # ---------------------------------------------------------------- Proposer protocol
    def begin(self, request_id: str, prompt: Sequence[int], seed: int | None = None,
              ctx: StepContext = DEFAULT_CONTEXT) -> None:
        self.arms.suppose(1, self.window_prior(ctx.cost))
        self.memory.begin(request_id, prompt, seed, ctx)
        self.lookahead.begin(request_id, prompt, seed, ctx)
        self._requests[request_id] = _Request(ArmSelector(2, shared=self.arms), TreeChooser(self._trees))

    def propose(self, request_id: str, context: Sequence[int], max_nodes: int,
                ctx: StepContext = DEFAULT_CONTEXT) -> Proposal:
        st = self._requests[request_id]
        cost = ctx.cost
        budget = min(max_nodes, self.params.decoding_length - 1)
        st.choosing = ctx.batch_size <= MAX_WINDOW_BATCH and st.memory_score < WINDOW_BELOW
        st.arm = st.selector.choose() if st.choosing else 0
        self.lookahead.set_window(request_id, self.params.lookahead.window if st.arm == 1 else 0)
        st.scored = st.choosing and (st.arm == 0 or self.lookahead.warm(request_id))
        mp = self.memory.propose(request_id, context, budget, ctx)
        m = mp.draft
        st.memory_tree = m
        st.memory_cost = cost(1 + len(m))
        st.lookahead_ran = st.arm == 1 or not m or (len(m) < budget and cost.free_rows(1 + len(m)) > 0)
        if st.lookahead_ran and st.arm == 0 and self.lookahead_gain < LA_MIN_GAIN:
            # its nodes have not been adding tokens: not worth its Python work, but probed
            self._eligible += 1
            st.lookahead_ran = self._eligible % LA_PROBE_EVERY == 0
        if not st.lookahead_ran:
            # the trie's tree fills its stair of the cost curve: lookahead could only add rows
            # that cost a step up, for candidates the trie mostly holds already (without the
            # window, the pool's n-grams come from the same prompt and output). Skipping it
            # saves its Python work; its pool catches up on the skipped tokens next time.
            st.rows, st.cost = 1 + len(m), st.memory_cost
            self.lookahead.skip(request_id, context)
            st.chooser.skipped(len(context))
            return Proposal(m)
        la = self.lookahead.propose(request_id, context, budget, ctx)
        window_rows = len(la.lookahead.tokens) if la.lookahead else 0
        fill = _breadth_first(self.lookahead.candidates(request_id))

        def padded(tree: DraftTree) -> DraftTree:
            # the forward computes the rows up to the top of the cost curve's stair anyway:
            # lookahead's candidates fill them, for nothing
            if not fill:
                return tree
            room = min(budget, len(tree) + cost.free_rows(1 + len(tree) + window_rows))
            return tree.extended(fill, room)

        st.chooser.observe(context)
        if m:
            # the trie's tree, or the trie's and lookahead's merged: at least as good, the
            # chooser learns by how much more and whether that pays for the extra rows
            merged = padded(m.extended(_paths(la.draft), budget)) if la.draft else DraftTree()
            trees = [padded(m), merged]
            expected = [mp.expected, max(mp.expected, la.expected)]
            tree = trees[st.chooser.choose(len(context), trees, expected, window_rows, cost)]
        else:
            # the trie found nothing worth its rows: lookahead's draft, which its own sizer
            # judged to pay against plain decoding (novel text: few cheap candidates)
            tree = padded(la.draft) if la.draft else la.draft
        st.rows = 1 + len(tree) + window_rows
        st.cost = cost(st.rows)
        return Proposal(tree, la.lookahead)

    def observe(self, request_id: str, committed: Sequence[int],
                lookahead_argmax: Sequence[int] | None = None) -> None:
        st = self._requests[request_id]
        # the last committed token is the bonus, never a draft
        by_memory = st.memory_tree.follow(committed[:-1]) if st.memory_tree else 0
        if committed:
            st.memory_score += 0.3 * (by_memory - st.memory_score)
            if st.lookahead_ran and st.arm == 0:
                gain = len(committed) - 1 - by_memory
                self.lookahead_gain += LA_GAIN_ALPHA * (gain - self.lookahead_gain)
        if committed and st.rows and st.scored:
            # paired: the trie's tree was part of the verified one (or nearly always is), so
            # what it alone would have given on this very step is known; the window is scored
            # relative to that
            base = (1 + by_memory, st.memory_cost) if st.arm == 1 else None
            st.selector.update(len(committed), st.cost, base or (len(committed), st.cost))
        st.memory_tree = None
        st.rows = 0
        self.memory.observe(request_id, committed)
        if st.lookahead_ran:
            self.lookahead.observe(request_id, committed, lookahead_argmax)

    def end(self, request_id: str) -> None:
        self.memory.end(request_id)
        self.lookahead.end(request_id)
        self._requests.pop(request_id, None)

    def window_prior(self, cost: CostModel) -> float:
        """The window arm's tokens per unit cost relative to the trie's alone, before evidence
        (policy.window_prior; the window is considered only while the trie's drafts are short)."""
        p = self.params.lookahead
        return window_prior(cost, (p.level - 1) * p.window - 1)
