"""hybrid: memory_decoding's trie, lookahead's n-gram pool and the request's own suffix matches
(suffix.py) as three sources of ONE draft tree; with plugin_params.draft_head, a draft head
trained for the model (draft_head.py) is a fourth, drafting every step from the model's own
hidden state (where nothing is copied, the one source that still finds tokens).

MindIE refuses to enable both algorithms at once; here they share one budget and one policy
(draft_policy.py): each source offers candidates with its own estimates, the policy calibrates
them on its own measurements, merges them into one tree and sends what pays for its rows (the
rows the forward pads anyway are filled with the next best candidates, for nothing). Each step:
- the trie (every request's output, this request's prompt, matched on the last 2 tokens) and
  the suffix source (this request's prompt and output, matched on the longest suffix: it knows
  which place of the context a copy comes from, where the trie sees 2 tokens that occur in many
  places; and a prompt answered before replays its answer from the first step, with a copy's
  budget, alone: beside an answer the request will write again, the others' forks only take
  its rows) offer first. When their candidates alone fill their stair of the cost curve (the
  forward pads its rows, so k rows cost what the next multiple of 4 does), the pool stays idle:
  it could only add rows that cost a step up, for candidates the others mostly hold already, and
  its Python work would be pure overhead;
- the pool also sits out where its nodes have not been adding accepted tokens to the trie's
  (the policy measures what each source alone gave, over the steps it ran): below LA_MIN_GAIN a
  step it runs one eligible step in LA_PROBE_EVERY, to keep measuring;
- the Jacobi window rides along only when it pays: it is considered only while the trie's
  and suffix drafts are accepted less than WINDOW_BELOW tokens a step, and then an ArmSelector
  compares tokens per unit of forward cost with and without it, learning across the engine's requests,
  paired: their own tree was verified in the same step, so what that step would have given
  without the window is known. Before evidence the window is priced by the cost curve
    (cost.window_prior). Batches > 2 never carry it: verification stops being free as the batch
  grows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ...errors import ConfigError
from .arms import ArmSelector, ArmStats
from .draft_head import DraftHead, HeadModel, HeadSource
from .unknown_keys import warn_unknown_keys
from ..policy.cost import CostModel, window_prior
from ..policy.calibration import PolicyStats
from ..policy.draft_policy import DraftPolicy
from .lookahead import LookaheadParams
from .lookahead_source import PoolSource
from .memory_decoding import COPYING, MemoryDecodingParams, TrieSource
from ..memory.output_memory import OutputMemory
from ..contract.proposer import DEFAULT_CONTEXT, Proposal, StepContext
from .suffix import SuffixSource
from ..contract.tree import DraftTree
from ..memory.trie import TokenTrie

_MEMORY_KEYS = {f.name for f in fields(MemoryDecodingParams)} - {"plugin_type"}
_LOOKAHEAD_KEYS = {f.name for f in fields(LookaheadParams)}
MAX_WINDOW_BATCH = 2
WINDOW_BELOW = 1.0  # accepted trie draft tokens per step under which the window is considered
# The pool's Python work on a step (a small share of a small model's step, docs/design-notes.md) is
# worth it only if its nodes add at least this many accepted tokens a step on top of the trie's;
# below that it sits out, and runs one eligible step in LA_PROBE_EVERY to keep measuring.
LA_MIN_GAIN = 0.02
LA_PROBE_EVERY = 8
TRIE, POOL, SUFFIX, PAST, REPLAY, HEAD = 0, 1, 2, 3, 4, 5  # the policy's sources
ALWAYS = (TRIE, SUFFIX, PAST, REPLAY)  # the sources asked every step; the pool and head may sit out
ALL = (*ALWAYS, POOL, HEAD)
# A draft head's chained steps read its weights after the forward has evicted them from cache, so
# a draft costs a few percent of a step (docs/benchmarks.md). Where its own nodes (tokens no other
# source offered) add under HEAD_MIN_GAIN accepted tokens a step, a lower bound of what it adds,
# it sits out, and drafts one eligible step in HEAD_PROBE_EVERY to keep measuring (as the pool
# does). Per request: where a turn rewrites an earlier answer the suffix source drafts the same
# tokens and the head's own gain falls there, while it still pays on the next request's new text.
HEAD_MIN_GAIN = 0.05
HEAD_PROBE_EVERY = 8


@dataclass(frozen=True)
class HybridParams:
    memory: MemoryDecodingParams = field(
        default_factory=lambda: MemoryDecodingParams(dynamic_algo=True)
    )
    lookahead: LookaheadParams = field(default_factory=LookaheadParams)
    draft_head: str | None = None  # a trained head's file (draft_head.py): a sixth source

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
        if self.draft_head is not None and (
            not isinstance(self.draft_head, str) or not self.draft_head.strip()
        ):
            raise ConfigError(
                f"plugin_params.draft_head={self.draft_head!r} must be the path of a draft head "
                "file (paraspec draft-head builds one); leave it out for no head"
            )
        if speculation_gamma is not None and speculation_gamma < self.query_tokens:
            raise ConfigError(
                f"speculation_gamma={speculation_gamma} is below the hybrid's need of "
                f"decoding_length + (level-1)*window - 1 = {self.query_tokens}; raise "
                "speculation_gamma or lower decoding_length/level/window"
            )
        return self

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HybridParams":
        """One flat dict, as MindIE-style plugin_params: memory_decoding keys (decoding_length,
        dynamic_algo, mode, ...), lookahead keys (level, window, guess_set_size) and draft_head."""
        known = _MEMORY_KEYS | _LOOKAHEAD_KEYS | {"plugin_type", "draft_head"}
        unknown = sorted(set(d) - known)
        if unknown:
            warn_unknown_keys("hybrid", unknown, known)
        # the trie's part sizes its drafts (dynamic_algo) unless told otherwise: a fixed-length
        # draft pays its rows even where the chooser would rather take lookahead's cheap one
        memory = MemoryDecodingParams.from_dict(
            {"dynamic_algo": True} | {k: v for k, v in d.items() if k in _MEMORY_KEYS}
        )
        lookahead = LookaheadParams.from_dict({k: v for k, v in d.items() if k in _LOOKAHEAD_KEYS})
        return cls(memory, lookahead, d.get("draft_head"))


@dataclass
class _Request:
    selector: ArmSelector  # arm 1 = with the window
    memory_tree: DraftTree | None = None  # what the trie and suffix sources alone would send
    memory_cost: float = 1.0  # ... and its forward cost
    memory_score: float = 1.0  # accepted draft tokens per step along it
    cost: float = 1.0  # the step's forward cost (all its rows)
    arm: int = 0
    scored: bool = False  # this step counts for the window's arms (chosen, not a warm-up)
    pool_ran: bool = False  # the pool proposed this step (so it observes it)
    head_ran: bool = False  # the draft head offered candidates this step
    head_eligible: int = 0  # steps the head could have drafted while sitting out (its probes)


class HybridDrafter:
    name = "hybrid"

    def __init__(
        self,
        params: HybridParams | None = None,
        trie: TokenTrie | None = None,
        eos_token_ids: Iterable[int] = (),
        arms: ArmStats | None = None,
        stats: PolicyStats | None = None,
        output_memory: OutputMemory | None = None,
        model: HeadModel | None = None,
    ):
        self.params = (params or HybridParams()).validate()
        self.head: HeadSource | None = None
        if self.params.draft_head is not None:
            if model is None:
                raise ConfigError(
                    "plugin_params.draft_head: this drafter is built without a model to draft "
                    "with (a replay tool); leave draft_head out here"
                )
            self.head = HeadSource(DraftHead.load(self.params.draft_head, model))
        self.memory = TrieSource(self.params.memory, tuple(eos_token_ids), trie)
        self.pool = PoolSource(self.params.lookahead, eos_token_ids)
        self.suffix = SuffixSource(eos_token_ids, output_memory)
        # the engine's memories (drafted from, written to, saved by LLM.save_memory)
        self.trie, self.output_memory = self.memory.trie, self.suffix.output_memory
        # window or not: learnt across this configuration's requests
        self.arms = arms if arms is not None else ArmStats(2)
        self.policy = DraftPolicy(len(ALL), stats)
        self._eligible = 0
        self._requests: dict[str, _Request] = {}

    # ---------------------------------------------------------------- Proposer protocol
    def begin(
        self,
        request_id: str,
        prompt: Sequence[int],
        seed: int | None = None,
        ctx: StepContext = DEFAULT_CONTEXT,
        identity: bytes | None = b"",
    ) -> None:
        self.arms.suppose(1, self.window_prior(ctx.cost))
        self.memory.begin(request_id, prompt)
        self.pool.begin(request_id, prompt, seed)
        self.suffix.begin(request_id, prompt, identity)
        self.policy.begin(request_id)
        if self.head is not None:
            self.head.begin(request_id)
        self._requests[request_id] = _Request(ArmSelector(2, shared=self.arms))

    def propose(
        self,
        request_id: str,
        context: Sequence[int],
        max_nodes: int,
        ctx: StepContext = DEFAULT_CONTEXT,
    ) -> Proposal:
        st = self._requests[request_id]
        cost, mp = ctx.cost, self.params.memory
        # a replayed answer is a copy from its first step: it gets a copy's budget at once
        copying = self.policy.state(request_id) == COPYING or self.suffix.replaying(request_id)
        budget = min(max_nodes, mp.max_draft + (mp.copy_length if copying else 0))
        choosing = ctx.batch_size <= MAX_WINDOW_BATCH and st.memory_score < WINDOW_BELOW
        st.arm = st.selector.choose() if choosing else 0
        st.scored = choosing and (st.arm == 0 or self.pool.warm(request_id))
        self.suffix.sync(request_id, context)
        r = self.suffix.replay(request_id, budget)
        if r:
            # the request writes this answer again (its parameters decide it): what the others
            # (the pool and the window too) would offer beside it are forks it says will not be
            # taken, and each would take a row from the chain's deep end
            self.memory.catch_up(request_id, context)
            m = s = d = None
            st.arm, st.scored = 0, False
        else:
            m = self.memory.candidates(request_id, context, budget, copying)
            s = self.suffix.candidates(request_id, context, budget)
            # while the text copies, the trie and suffix drafts run deep and the head's chained
            # steps would only add their own time
            st.head_ran = (
                self.head is not None
                and not copying
                and self.head.ready(request_id, context[-1])
                and self._head_pays(request_id, st)
            )
            d = self.head.candidates(request_id, context[-1], budget) if st.head_ran else None
        h = self.suffix.memory(request_id, budget)
        # what the trie and the suffix source alone would send: the window's paired baseline, and
        # whether the pool can add anything for free (the tree fills its stair: it could only add
        # rows a step up)
        alone, expected = self.policy.select(
            request_id, context, [m, None, s, h, r, d], budget, cost
        )
        st.memory_tree, st.memory_cost = alone, cost(1 + len(alone))
        st.pool_ran = not r and (
            st.arm == 1 or not alone or (len(alone) < budget and cost.free_rows(1 + len(alone)) > 0)
        )
        if st.pool_ran and st.arm == 0 and self.policy.stats.gain[POOL] < LA_MIN_GAIN:
            # its nodes have not been adding tokens: not worth its Python work, but probed
            self._eligible += 1
            st.pool_ran = self._eligible % LA_PROBE_EVERY == 0
        if not st.pool_ran:  # the pool-less draft is the step's (select scored it)
            st.cost = st.memory_cost
            return Proposal(alone, expected=expected, reason=self.policy.reason(request_id))
        tree, branch = self.pool.step(
            request_id, context, self.params.lookahead.window if st.arm == 1 else 0
        )
        window_rows = len(branch.tokens) if branch else 0
        draft, expected = self.policy.select(
            request_id, context, [m, tree, s, h, r, d], budget, cost, window_rows
        )
        st.cost = cost(1 + len(draft) + window_rows)
        return Proposal(draft, branch, expected, self.policy.reason(request_id))

    def observe(
        self,
        request_id: str,
        committed: Sequence[int],
        lookahead_argmax: Sequence[int] | None = None,
    ) -> None:
        st = self._requests[request_id]
        if not committed:
            return
        # the last committed token is the bonus, never a draft
        by_memory = st.memory_tree.follow(committed[:-1]) if st.memory_tree else 0
        st.memory_score += 0.3 * (by_memory - st.memory_score)
        if st.scored:
            # paired: the trie's own tree was part of the verified one (or nearly always is), so
            # what it alone would have given on this very step is known; the window is scored
            # relative to that
            base = (1 + by_memory, st.memory_cost) if st.arm == 1 else (len(committed), st.cost)
            st.selector.update(len(committed), st.cost, base)
        ran = ALWAYS + ((POOL,) if st.pool_ran else ()) + ((HEAD,) if st.head_ran else ())
        self.policy.observe(request_id, committed, sources=ran)
        self.memory.observe(request_id, committed)
        self.suffix.observe(request_id, committed)
        if self.head is not None:
            self.head.observe(request_id, committed)
        if st.pool_ran:
            self.pool.observe(request_id, committed, lookahead_argmax)
        # a step without propose (its gate skipped the look) scores nothing and leaves the pool be
        st.memory_tree, st.scored, st.pool_ran, st.head_ran = None, False, False, False

    def _head_pays(self, request_id: str, st: _Request) -> bool:
        """Whether the head drafts this step: its own nodes have been adding HEAD_MIN_GAIN accepted
        tokens a step in this request, or this is its probe."""
        if self.policy.gain(request_id, HEAD) >= HEAD_MIN_GAIN:
            return True
        st.head_eligible += 1
        return st.head_eligible % HEAD_PROBE_EVERY == 0

    @property
    def wants_features(self) -> bool:
        """Whether the engine hands this drafter the verified rows' features (its draft head)."""
        return self.head is not None

    def observe_feature(self, request_id: str, feature, token: int) -> None:
        """The feature of the row whose logits chose `token`, the last committed one (after the
        prefill: the first token; after a step: its bonus token)."""
        if self.head is not None:
            self.head.observe_feature(request_id, feature, token)

    def end(self, request_id: str) -> None:
        if self.head is not None:
            self.head.end(request_id)
        self.memory.end(request_id)
        self.pool.end(request_id)
        self.suffix.end(request_id)
        self.policy.end(request_id)
        self._requests.pop(request_id, None)

    def window_prior(self, cost: CostModel) -> float:
        """The window arm's tokens per unit cost relative to the trie's alone, before evidence
        (cost.window_prior; the window is considered only while the trie's drafts are short)."""
        p = self.params.lookahead
        return window_prior(cost, (p.level - 1) * p.window - 1)
