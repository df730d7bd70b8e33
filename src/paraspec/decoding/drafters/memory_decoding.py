"""memory_decoding: draft from a token trie of prompts and past outputs (Ant Group's Lookahead,
KDD 2024; MindIE's `memory_decoding` plugin).

Per request: `begin` stores the prompt under the request id (only that request sees it); every
step `propose` looks up the last 2 committed tokens (falling back to 1) and offers the trie's most
probable continuations (a tree, or MindIE's single chain), each node with its path's frequency;
`observe` appends the committed tokens to the shared output memory, which persists across
requests; `end` drops the prompt. What is worth verifying is the draft policy's call
(draft_policy.py: calibrated acceptance against the forward cost), as for every drafter.

Budget (MindIE semantics): `decoding_length` counts the query tokens of one step, root included,
so a draft has at most decoding_length - 1 nodes; while the output copies a long stretch,
`copy_length` more (the trie's chain followed on from its deepest node).
  * dynamic_algo=false: the whole draft when the policy values it above 0, else its best prefix;
  * dynamic_algo=true: the best prefix, capped by batch size as MindIE does.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Hashable, Sequence

from ...errors import ConfigError
from ..policy.calibration import PolicyStats
from ..policy.draft_policy import DraftPolicy
from .unknown_keys import warn_unknown_keys
from ..contract.proposer import DEFAULT_CONTEXT, Proposal, StepContext
from ..contract.tree import ROOT, DraftTree
from ..memory.trie import TokenTrie

MAX_DECODING_LENGTH = 16
PROMPT_WEIGHT = 1.0  # a prompt count is worth this many output counts when ranking nodes
COPYING = 2  # calibration.streak_state after 4+ accepted draft tokens (or a 4+ run)
CANDIDATES = 2  # trie nodes offered per node the budget allows ...
MAX_CANDIDATES = 64  # ... at most


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
    copy_length: int = 32
    """Draft nodes allowed beyond decoding_length - 1 while the output copies a long stretch (the
    step before accepted 4+ draft tokens): the trie's chain is followed on past branch_length and
    the policy verifies the extra nodes only where the cost curve says they pay. Not MindIE's
    decoding_length, which stays [1, 16]; 0 turns it off. [0, 48]"""
    plugin_type: str = "memory_decoding"

    @property
    def max_draft(self) -> int:
        return self.decoding_length - 1

    @property
    def window(self) -> int:
        return self.branch_length + 2

    def validate(self, speculation_gamma: int | None = None) -> "MemoryDecodingParams":
        if self.plugin_type != "memory_decoding":
            raise ConfigError(
                f"plugin_params.plugin_type={self.plugin_type!r} is not memory_decoding; "
                'pass "plugin_type": "memory_decoding"'
            )
        if not 1 <= self.decoding_length <= MAX_DECODING_LENGTH:
            raise ConfigError(
                f"plugin_params.decoding_length={self.decoding_length} is outside "
                f"[1, {MAX_DECODING_LENGTH}]; pass a value from 1 to {MAX_DECODING_LENGTH}"
            )
        if self.mode not in ("tree", "chain"):
            raise ConfigError(
                f"plugin_params.mode={self.mode!r} is not one of 'tree', 'chain'; "
                'pass "mode": "tree" or "chain"'
            )
        if not 1 <= self.branch_length <= 64:
            raise ConfigError(
                f"plugin_params.branch_length={self.branch_length} is outside [1, 64]; "
                "pass a value from 1 to 64 (16 is the default)"
            )
        if not 0 <= self.copy_length <= 48:
            raise ConfigError(
                f"plugin_params.copy_length={self.copy_length} is outside [0, 48]; "
                "pass a value from 0 to 48 (0 turns long copy drafts off)"
            )
        if self.max_trie_nodes < 1024:
            raise ConfigError(
                f"plugin_params.max_trie_nodes={self.max_trie_nodes} is below 1024; "
                "pass at least 1024 (a node takes 70-100 bytes)"
            )
        if speculation_gamma is not None and speculation_gamma < self.decoding_length:
            raise ConfigError(
                f"speculation_gamma={speculation_gamma} is smaller than "
                f"plugin_params.decoding_length={self.decoding_length}; set "
                f"speculation_gamma to at least {self.decoding_length} or lower "
                "decoding_length"
            )
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MemoryDecodingParams":
        """Typed fields from a plugin_params dict; unknown keys warn (MindIE configs carry others)."""
        defaults = {f.name: f.default for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        warn_unknown_keys("memory_decoding", [k for k in d if k not in defaults], defaults)
        for key, value in d.items():
            if key not in defaults:
                continue
            want = type(defaults[key])
            # `type is`, not isinstance: true/false is not a length, and 0/1 is not a boolean
            if type(value) is not want:
                raise ConfigError(
                    f"plugin_params.{key}={value!r} is a {_json_type(type(value))}; "
                    f"pass a JSON {_json_type(want)} (default {defaults[key]!r})"
                )
            kwargs[key] = value
        return cls(**kwargs)


class TrieSource:
    """memory_decoding's candidates: the trie's most probable continuations of a request's context
    with their path frequencies, from its prompt and every request's output."""

    def __init__(
        self,
        params: MemoryDecodingParams,
        eos_token_ids: Sequence[int] = (),
        trie: TokenTrie | None = None,
    ) -> None:
        self.params = params
        self.trie = trie if trie is not None else TokenTrie(params.max_trie_nodes, params.window)
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self._seen: dict[Hashable, int] = {}  # tokens of a request in the memory: prompt + output
        self._finished: set[Hashable] = set()  # a stop token was committed: no more output

    def begin(self, key: Hashable, prompt: Sequence[int]) -> None:
        if key in self._seen:
            self.end(key)
        for segment in self._segments(prompt):
            self.trie.insert(segment, key=key)
        self._seen[key] = len(prompt)

    def candidates(
        self, key: Hashable, context: Sequence[int], budget: int, copying: bool
    ) -> DraftTree:
        """Up to `budget` nodes below the root context[-1], best first by the trie's estimate; when
        `copying`, a chain that reaches branch_length is followed on (re-anchored at its end)."""
        self.catch_up(key, context)
        if budget <= 0 or not context or context[-1] in self.eos:
            return DraftTree()
        p = self.params
        # more candidates than can be sent: the policy, not the trie's ranking, picks among them
        first = min(CANDIDATES * (budget if copying else min(budget, p.max_draft)), MAX_CANDIDATES)
        m = self.trie.match(
            context, key, first, p.mode == "tree", PROMPT_WEIGHT, max_depth=p.branch_length
        )
        if copying and p.copy_length and m:
            self._follow_on(m, key, context, min(budget, first + p.copy_length))
        return m

    def observe(self, key: Hashable, committed: Sequence[int]) -> None:
        self._remember(key, committed)
        self._seen[key] = self._seen.get(key, 0) + len(committed)

    def catch_up(self, key: Hashable, context: Sequence[int]) -> None:
        """Tokens committed without observe (the prefill's token) enter the memory now."""
        seen = self._seen.get(key)
        if seen is None:
            raise KeyError(f"memory_decoding: unknown request {key!r}; call begin() first")
        if len(context) > seen:
            self._remember(key, context[seen:])
            self._seen[key] = len(context)

    def end(self, key: Hashable) -> None:
        self.trie.close(key)
        self.trie.release(key)
        self._seen.pop(key, None)
        self._finished.discard(key)

    def _follow_on(self, m: DraftTree, key: Hashable, context: Sequence[int], budget: int) -> None:
        """Extend m's deepest chain past the trie's window: match again at its end, repeatedly."""
        depths = m.depths()
        while len(m) < budget:
            deepest = max(range(len(m)), key=lambda i: (depths[i], m.probs[i]))
            if depths[deepest] % self.params.branch_length:
                return  # the chain ended before the window did
            path = [m.tokens[i] for i in m.path_to(deepest)]
            more = self.trie.match(
                list(context) + path,
                key,
                budget - len(m),
                False,
                PROMPT_WEIGHT,
                max_depth=self.params.branch_length,
            )
            if not more:
                return
            base, p0 = deepest, m.probs[deepest]
            index = {ROOT: base}
            for i, (tok, par) in enumerate(zip(more.tokens, more.parents)):
                index[i] = m.add(tok, index[par], min(p0, p0 * more.probs[i]))
                depths.append(depths[index[par]] + 1 if index[par] != ROOT else 1)

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

    def _remember(self, key: Hashable, tokens: Sequence[int]) -> None:
        """Append committed tokens to the shared output memory; stop at the first stop token."""
        if key in self._finished:
            return
        toks = list(tokens)
        for i, t in enumerate(toks):
            if t in self.eos:
                toks = toks[:i]
                self._finished.add(key)
                break
        if toks:
            self.trie.append(key, toks)
        if key in self._finished:
            self.trie.close(key)


class MemoryDrafter:
    """The memory_decoding Proposer: the trie's candidates, sized by the draft policy."""

    name = "memory_decoding"

    def __init__(
        self,
        params: MemoryDecodingParams | None = None,
        eos_token_ids: Sequence[int] = (),
        trie: TokenTrie | None = None,
        stats: PolicyStats | None = None,
    ) -> None:
        self.params = (params or MemoryDecodingParams()).validate()
        self.source = TrieSource(self.params, eos_token_ids, trie)
        self.trie = self.source.trie
        self.policy = DraftPolicy(1, stats)
        self._accepted: dict[Hashable, int] = {}  # draft tokens accepted last step

    def begin(
        self,
        request_id: str,
        prompt: Sequence[int],
        seed: int | None = None,
        ctx: StepContext = DEFAULT_CONTEXT,
        identity: bytes | None = b"",
    ) -> None:
        self.source.begin(request_id, prompt)
        self.policy.begin(request_id)
        self._accepted[request_id] = 0

    def propose(
        self,
        request_id: str,
        context: Sequence[int],
        max_nodes: int,
        ctx: StepContext = DEFAULT_CONTEXT,
    ) -> Proposal:
        p = self.params
        budget = min(max_nodes, p.max_draft + p.copy_length, self.batch_cap(ctx.batch_size))
        self.source.catch_up(request_id, context)
        last = self._accepted[request_id]
        if ctx.batch_size > 4 and not p.dynamic_algo and last < p.decoding_length / 2:
            budget = min(budget, max(1, p.max_draft // 2))  # MindIE's static rule
        copying = self.policy.state(request_id) == COPYING
        m = self.source.candidates(request_id, context, budget, copying)
        limit = budget if copying else min(budget, p.max_draft)
        draft, expected = self.policy.select(
            request_id, context, [m], limit, ctx.cost, send_all=0 if p.dynamic_algo else p.max_draft
        )
        return Proposal(draft, expected=expected, reason=self.policy.reason(request_id))

    def observe(
        self,
        request_id: str,
        committed: Sequence[int],
        lookahead_argmax: Sequence[int] | None = None,
    ) -> None:
        if not committed:
            return
        self._accepted[request_id] = self.policy.observe(request_id, committed)
        self.source.observe(request_id, committed)

    def end(self, request_id: str) -> None:
        self.source.end(request_id)
        self.policy.end(request_id)
        self._accepted.pop(request_id, None)

    def batch_cap(self, batch_size: int) -> int:
        """Shorter drafts when verification stops being free. dynamic_algo follows MindIE's caps
        (half at batch > 4, 3 at batch > 19); the static mode halves a request's draft at
        batch > 4 when it accepted less than half of decoding_length last step (in propose)."""
        full = self.params.max_draft + self.params.copy_length
        if not self.params.dynamic_algo or batch_size <= 4:
            return full
        return (
            max(1, self.params.max_draft // 2)
            if batch_size <= 19
            else min(3, self.params.max_draft)
        )


def _json_type(t: type) -> str:
    return {
        int: "integer",
        bool: "boolean",
        str: "string",
        float: "number",
        type(None): "null",
        list: "array",
        dict: "object",
    }.get(t, t.__name__)
