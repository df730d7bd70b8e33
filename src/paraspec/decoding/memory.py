"""memory_decoding: draft from a token trie of prompts and past outputs (Ant Group's Lookahead,
KDD 2024; MindIE's `memory_decoding` plugin).

Per request: `begin` stores the prompt under the request id (only that request sees it); every
step `propose` looks up the last 2 committed tokens (falling back to 1) and returns the most
probable draft tree (or chain) below the root; `observe` appends the committed tokens to the
shared output memory, which persists across requests, and scores the last draft; `end` drops
the prompt.

Budget (MindIE semantics): `decoding_length` counts the query tokens of one step, root included,
so a draft has at most decoding_length - 1 nodes.

How much to draft. The trie gives each node a probability p of being accepted (its path's
frequency). Per request we measure how far that estimate is off, in two parts, each a ratio of
decayed sums (DECAY per scored draft, one pseudo-count): gamma = first tokens accepted / expected,
and kappa = continuations accepted / expected given the parent was accepted. On novel text a
branch seen once is often right for a token and rarely for ten (kappa << 1); when the answer
copies the prompt both are about 1. The trie ranks nodes with kappa applied below the first
level, and a prefix of n of them (drafts are best-first, so every prefix is a tree) is worth
    sum(min(1, gamma * p_i), i < n) - (rate + MARGIN - 1) * (cost(1 + n) - 1)
extra tokens, where cost(k) is the forward cost of k query tokens relative to 1 and rate is the
request's recent tokens per unit of cost (time is dearer when steps already yield a lot). MARGIN
covers the winner's curse: drafts get sent right after lucky hits raised gamma, so in the
marginal regime they pay off ~4x less than estimated; where drafts pay, they pay by far more.
A new request starts from the drafter-wide gamma and kappa (all requests' evidence, decaying
10x slower), worth one expected token, so one workload's lesson carries to the next request.
  * dynamic_algo=false: the whole draft (up to decoding_length - 1) when it is worth > 0, else
    the best prefix, possibly empty (plain decoding);
  * dynamic_algo=true: the best prefix, capped by batch size as MindIE does.
Drafts are scored whole, also those not (all) sent: such a draft is walked along the tokens
committed in the next steps, so a request that stopped drafting starts again as soon as the
memory is right, and a partly sent draft still measures its deep nodes.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Hashable, Sequence

from ..errors import ConfigError
from .proposer import DEFAULT_CONTEXT, Proposal, StepContext
from .tree import DraftTree, descend
from .trie import TokenTrie

MAX_DECODING_LENGTH = 16
PROMPT_WEIGHT = 1.0         # a prompt count is worth this many output counts when ranking nodes
DECAY = 0.9                 # calibration sums keep this much of their past per scored draft
MAX_WALKS = 4               # drafts being scored at once per request
MARGIN = 2.0                # at rate 1, a draft must be worth this many times its cost
SHARED_DECAY = 0.99         # the drafter-wide calibration forgets 10x slower
RATE_ALPHA = 0.1            # weight of the newest step in EMA(tokens) and EMA(cost)


@dataclass(frozen=True)
class MemoryDecodingParams:
    """MindIE-compatible `plugin_params` of memory_decoding, plus paraspec's own knobs."""

    decoding_length: int = 16
    """Query tokens per step and request, root included: at most decoding_length - 1 drafts. [1, 16]"""
    dynamic_algo: bool = False
    """Adapt each request's draft length to its measured acceptance (and to the batch size)."""
    mode: str = "tree"
    """"tree": best nodes of the matched subtree, several branches (PIA's hierarchical mode);
    "chain": one branch, the most counted child at each level (MindIE)."""
    branch_length: int = 16
    """Deepest draft the trie can hold below a 2-token match; the trie stores windows of
    branch_length + 2 tokens. [1, 64]"""
    max_trie_nodes: int = 1 << 20
    """Node budget of the trie (70-100 bytes a node); decay and pruning keep it. >= 1024"""
    plugin_type: str = "memory_decoding"

    @property
    def max_draft(self) -> int:
        return self.decoding_length - 1

    @property
    def window(self) -> int:
        return self.branch_length + 2

    def validate(self, speculation_gamma: int | None = None) -> "MemoryDecodingParams":
        if self.plugin_type != "memory_decoding":
            raise ConfigError(f"plugin_params.plugin_type={self.plugin_type!r} is not memory_decoding; "
                              "pass \"plugin_type\": \"memory_decoding\"")
        if not 1 <= self.decoding_length <= MAX_DECODING_LENGTH:
            raise ConfigError(f"plugin_params.decoding_length={self.decoding_length} is outside "
                              f"[1, {MAX_DECODING_LENGTH}]; pass a value from 1 to {MAX_DECODING_LENGTH}")
        if self.mode not in ("tree", "chain"):
            raise ConfigError(f"plugin_params.mode={self.mode!r} is not one of 'tree', 'chain'; "
                              "pass \"mode\": \"tree\" or \"chain\"")
        if not 1 <= self.branch_length <= 64:
            raise ConfigError(f"plugin_params.branch_length={self.branch_length} is outside [1, 64]; "
                              "pass a value from 1 to 64 (16 is the default)")
        if self.max_trie_nodes < 1024:
            raise ConfigError(f"plugin_params.max_trie_nodes={self.max_trie_nodes} is below 1024; "
                              "pass at least 1024 (a node takes 70-100 bytes)")
        if speculation_gamma is not None and speculation_gamma < self.decoding_length:
            raise ConfigError(f"speculation_gamma={speculation_gamma} is smaller than "
                              f"plugin_params.decoding_length={self.decoding_length}; set "
                              f"speculation_gamma to at least {self.decoding_length} or lower "
                              "decoding_length")
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemoryDecodingParams":
        """Typed fields from a plugin_params dict; unknown keys warn (MindIE configs carry others)."""
        defaults = {f.name: f.default for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in d.items():
            if key not in defaults:
                warnings.warn(f"plugin_params: unknown key {key!r} for memory_decoding is ignored "
                              f"(known: {', '.join(sorted(defaults))})", stacklevel=2)
                continue
            want = type(defaults[key])
            # `type is`, not isinstance: true/false is not a length, and 0/1 is not a boolean
            if type(value) is not want:
                raise ConfigError(f"plugin_params.{key}={value!r} is a {_json_type(type(value))}; "
                                  f"pass a JSON {_json_type(want)} (default {defaults[key]!r})")
            kwargs[key] = value
        return cls(**kwargs)


class _Walk:
    """A draft being scored against the tokens committed after its root."""
    __slots__ = ("children", "probs", "kappa", "row")

    def __init__(self, draft: DraftTree, kappa: float) -> None:
        self.children = draft.children()
        self.probs = draft.probs
        self.kappa = kappa
        self.row = 0                        # query row reached: 0 = the root


@dataclass
class _Calibration:
    """Decayed sums: first tokens accepted / expected, continuations accepted / expected."""
    decay: float
    hit1: float = 0.0
    exp1: float = 0.0
    hit2: float = 0.0
    exp2: float = 0.0

    def new_draft(self, expected_first: float) -> None:
        d = self.decay
        self.hit1, self.exp1 = self.hit1 * d, self.exp1 * d + expected_first
        self.hit2, self.exp2 = self.hit2 * d, self.exp2 * d

    def gamma(self, prior: float) -> float:     # the prior weighs as one expected token
        return (self.hit1 + prior) / (self.exp1 + 1.0)

    def kappa(self, prior: float) -> float:
        return (self.hit2 + prior) / (self.exp2 + 1.0)


@dataclass
class _Request:
    n_tokens: int                   # tokens of this request the drafter has seen: prompt + committed
    cal: _Calibration = field(default_factory=lambda: _Calibration(DECAY))
    draft: DraftTree | None = None  # the draft sent this step
    draft_cost: float = 1.0         # its forward cost (root + draft rows), relative to one row
    walks: list[_Walk] = field(default_factory=list)
    tok_ema: float = 1.0            # EMA of tokens committed per step
    cost_ema: float = 1.0           # EMA of forward cost per step (relative to one token)
    last_accepted: int = 0
    finished: bool = False          # a stop token was committed: nothing more enters the memory


class MemoryDrafter:
    """The memory_decoding Proposer. The trie may be shared with (or saved by) the engine."""

    name = "memory_decoding"

    def __init__(self, params: MemoryDecodingParams | None = None,
                 eos_token_ids: Sequence[int] = (), trie: TokenTrie | None = None) -> None:
        self.params = (params or MemoryDecodingParams()).validate()
        self.trie = trie if trie is not None else TokenTrie(self.params.max_trie_nodes,
                                                            self.params.window)
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self._tree = self.params.mode == "tree"
        self._requests: dict[Hashable, _Request] = {}
        self._shared = _Calibration(SHARED_DECAY)   # every request's, the prior of new ones

    # ---------------------------------------------------------------- Proposer protocol
    def begin(self, request_id: str, prompt: Sequence[int], seed: int | None = None,
              ctx: StepContext = DEFAULT_CONTEXT) -> None:
        if request_id in self._requests:
            self.end(request_id)
        for segment in self._segments(prompt):
            self.trie.insert(segment, key=request_id)
        self._requests[request_id] = _Request(n_tokens=len(prompt))

    def propose(self, request_id: str, context: Sequence[int], max_nodes: int,
                ctx: StepContext = DEFAULT_CONTEXT) -> Proposal:
        st = self._state(request_id)
        st.draft = None
        if len(context) > st.n_tokens:      # committed without observe (e.g. the prefill's token)
            self._remember(request_id, st, context[st.n_tokens:])
            st.n_tokens = len(context)
        budget = min(max_nodes, self.params.max_draft, self._batch_cap(ctx.batch_size))
        if (ctx.batch_size > 4 and not self.params.dynamic_algo
                and st.last_accepted < self.params.decoding_length / 2):
            budget = min(budget, max(1, self.params.max_draft // 2))   # MindIE's static rule
        if budget <= 0 or not context or context[-1] in self.eos:
            return Proposal(DraftTree())
        gamma, kappa = self._calibration(st)
        m = self.trie.match(context, request_id, budget, self._tree, PROMPT_WEIGHT, kappa,
                            max_depth=self.params.branch_length)
        n, expected = self._worth_sending(st, m.probs, gamma, ctx.cost.table)
        # score the whole draft: always when it is all sent, else one unsent probe at a time
        if m.tokens and (n == len(m) or not st.walks) and len(st.walks) < MAX_WALKS:
            first = sum(p for p, par in zip(m.probs, m.parents) if par < 0)
            st.cal.new_draft(first)
            self._shared.new_draft(first)
            st.walks.append(_Walk(m, kappa))
        st.draft_cost = ctx.cost(1 + n)
        if n == 0:
            return Proposal(DraftTree())
        st.draft = m.truncated(n)
        return Proposal(st.draft, expected=expected)

    def observe(self, request_id: str, committed: Sequence[int],
                lookahead_argmax: Sequence[int] | None = None) -> None:
        st = self._state(request_id)
        if not committed:
            return
        st.last_accepted = st.draft.follow(committed[:-1]) if st.draft else 0   # the bonus is never a draft
        st.walks = [w for w in st.walks if self._score(st, w, committed)]
        r = RATE_ALPHA
        # what this drafter's own draft earned (all of `committed` when it drafts alone; inside
        # hybrid, tokens other drafters' nodes won must not make its rows look dearer)
        st.tok_ema = r * (1 + st.last_accepted) + (1 - r) * st.tok_ema
        st.cost_ema = r * st.draft_cost + (1 - r) * st.cost_ema
        st.draft, st.draft_cost = None, 1.0
        self._remember(request_id, st, committed)
        st.n_tokens += len(committed)

    def end(self, request_id: str) -> None:
        self.trie.close(request_id)
        self.trie.release(request_id)
        self._requests.pop(request_id, None)

    # ---------------------------------------------------------------- internals
    def _batch_cap(self, batch_size: int) -> int:
        """Shorter drafts when verification stops being free. dynamic_algo follows MindIE's caps
        (half at batch > 4, 3 at batch > 19); the static mode halves a request's draft at
        batch > 4 when it accepted less than half of decoding_length last step (in propose)."""
        full = self.params.max_draft
        if not self.params.dynamic_algo or batch_size <= 4:
            return full
        return max(1, full // 2) if batch_size <= 19 else min(3, full)

    def _calibration(self, st: _Request) -> tuple[float, float]:
        """(gamma, kappa) of a request, its evidence added to the drafter-wide estimate."""
        shared = self._shared
        return st.cal.gamma(shared.gamma(1.0)), st.cal.kappa(shared.kappa(1.0))

    def _score(self, st: _Request, walk: _Walk, committed: Sequence[int]) -> bool:
        """Advance a walk along committed tokens, counting hits; False once it left the draft."""
        rows = descend(walk.children, walk.row, committed)
        alive = len(rows) == len(committed)
        # every row a token was tried from (the failing try included); below an accepted node
        # a try is a continuation trial, expected to succeed with the kids' share of its p
        trials = ([walk.row] + rows)[:len(rows) + (not alive)]
        exp2 = sum(sum(walk.probs[c] for c in walk.children[r].values()) / (walk.probs[r - 1] * walk.kappa)
                   for r in trials if r and walk.children[r])
        hit1 = 1.0 if rows and walk.row == 0 else 0.0
        hit2 = len(rows) - hit1
        if rows:
            walk.row = rows[-1]
        for cal in (st.cal, self._shared):
            cal.hit1 += hit1
            cal.hit2 += hit2
            cal.exp2 += exp2
        return alive

    def _worth_sending(self, st: _Request, probs: list[float], gamma: float,
                       cost: list[float]) -> tuple[int, float]:
        """How many draft nodes to send (see the module docstring), and the draft tokens they
        are expected to get accepted. cost[k]: a query of k rows (root + k - 1 drafts)."""
        if not probs:
            return 0, 0.0
        price = st.tok_ema / st.cost_ema + MARGIN - 1.0    # tokens a unit of forward cost must buy
        gain, best_n, best_v, best_gain = 0.0, 0, 0.0, 0.0
        for i, p in enumerate(probs):
            gain += min(1.0, gamma * p)
            v = gain - price * (cost[i + 2] - 1.0)
            if v > best_v:
                best_n, best_v, best_gain = i + 1, v, gain
        if not self.params.dynamic_algo and v > 0:
            return len(probs), gain
        return best_n, best_gain

    def _state(self, request_id: Hashable) -> _Request:
        st = self._requests.get(request_id)
        if st is None:
            raise KeyError(f"memory_decoding: unknown request {request_id!r}; call begin() first")
        return st

    def _segments(self, tokens: Sequence[int]) -> list[list[int]]:
        """Split at stop tokens: a stop token is never an anchor, a draft token or inside a path."""
        segments, cur = [], []
        for t in tokens:
            if t in self.eos:
                if cur:
                    segments.append(cur)
                cur = []
            else:
                cur.append(int(t))
        if cur:
            segments.append(cur)
        return segments

    def _remember(self, request_id: Hashable, st: _Request, tokens: Sequence[int]) -> None:
        """Append committed tokens to the shared output memory; stop at the first stop token."""
        if st.finished:
            return
        toks = list(tokens)
        for i, t in enumerate(toks):
            if t in self.eos:
                toks, st.finished = toks[:i], True
                break
        if toks:
            self.trie.append(request_id, toks)
        if st.finished:
            self.trie.close(request_id)


def _json_type(t: type) -> str:
    return {int: "integer", bool: "boolean", str: "string", float: "number", type(None): "null",
            list: "array", dict: "object"}.get(t, t.__name__)
