"""Drafts inside an ASPD block: each open branch carries its own draft below its last token,
all of them verified in the block's one forward (APAR: branching and speculation multiply).

Sources of a branch's candidates, each seeing exactly what the branch sees (the prefix, then
branch k's own tokens, never a sibling's):
  0. the serial drafter's trie, matched on the branch's last two tokens (past requests' output
     and this prompt);
  1. the branch's own context, longest suffix match (context_match.ContextIndex): what followed
     the text it just wrote where that text occurred before (the prompt, the serial answer, its
     own earlier tokens, which the trie does not hold until the block closes);
  2. the prompt after the branch's title (context_match.anchored), while the branch restates it.
Branch k's rows hang below its last fed token: node i sits at that token's position + depth(i)
and sees the shared prefix, branch k's slots and rows, its ancestors and itself, never a sibling
(block_query.py builds the mask). Verification is the engine's acceptance walk
(acceptance.walk) per branch, with the branch grammar on every draw; a drawn `<|/branch|>` that
a draft node carries is accepted too (its KV is the one the branch's closing step would write).

Which nodes go in: the one draft policy of every drafter (decoding/policy/draft_policy.py) calibrates
and merges each branch's sources (per source, depth band, estimate band and copy streak, from
what branch drafts have been accepted so far: each branch is a stream of the policy, its
statistics shared by every branch of the decoder); the merged trees are ranked best first over
all branches, and the prefix with the most expected tokens per unit of forward cost is sent (the
engine's measured curve: rows up to a padded stair come free; each branch's share of it is a
best-first prefix of its tree). Greedy only: a sampled branch keeps one token a step (the
sampler's counter order would differ from the no-draft run, so outputs would not be the same
draws).
"""

from __future__ import annotations

from typing import Hashable, Sequence

from ..decoding.policy.cost import CostModel
from ..decoding.policy.calibration import PolicyStats
from ..decoding.policy.draft_policy import DraftPolicy
from ..decoding.drafters.memory_decoding import PROMPT_WEIGHT
from ..decoding.contract.tree import ROOT, DraftTree
from ..model.attention import max_draft_rows
from ..sequence import SequenceState
from .block import Block
from .context_match import ContextIndex, anchored_drafts
from .markup import MarkupIds

MAX_ROWS = 32  # rows of one block step, branch roots and drafts together
CANDIDATES = 8  # nodes offered per branch and source
MAX_DEPTH = 8  # deepest branch draft node
SOURCES = ("trie", "context", "title")
LIVE_BLOCKS = 64  # blocks whose branch streams the policy keeps (an aborted request's go)


class BranchDrafter:
    """Drafts for the open branches of a block step (one per AspdDecoder)."""

    def __init__(self, trie):
        self.trie = trie
        self.policy = DraftPolicy(len(SOURCES), PolicyStats(len(SOURCES)))
        self._blocks: dict[Hashable, list[Hashable]] = {}  # block -> its branches' policy keys

    # ----------------------------------------------------------------- a block's streams
    def open_block(self, block: Hashable, n_branches: int) -> list[Hashable]:
        """Policy streams for a new block's branches (past LIVE_BLOCKS the oldest block's end: a
        request aborted inside a block never closes it; a live block that lost its streams gets
        fresh ones at its next step, _stream)."""
        keys = [(block, k) for k in range(n_branches)]
        for key in keys:
            self._stream(key)
        return keys

    def close_block(self, block: Hashable) -> None:
        for key in self._blocks.pop(block, []):
            self.policy.end(key)

    def _stream(self, key: tuple) -> None:
        block = key[0]
        if key in self._blocks.get(block, ()):
            return
        if block not in self._blocks:
            while len(self._blocks) >= LIVE_BLOCKS:
                self.close_block(next(iter(self._blocks)))
            self._blocks[block] = []
        self.policy.begin(key)
        self._blocks[block].append(key)

    # ----------------------------------------------------------------------- one step
    def block_drafts(
        self, b: Block, seq: SequenceState, cost: CostModel, base: int, ids: MarkupIds
    ) -> dict[int, DraftTree]:
        """Per open branch of block b, its draft worth verifying; none where the rows would not
        fit (the token budget, the cache, one key bucket: the torch attention's exactness needs
        the step's rows in one). `base`: the step's rows before the branches' pending tokens."""
        base += sum(len(br.pending) for br in b.branches)
        have = sum(len(br.fed) + len(br.pending) for br in b.branches)
        cache = seq.cache
        room = min(
            MAX_ROWS - base,
            max_draft_rows(cache) + 1 - base,
            cache.capacity - cache.length - base,
            seq.max_tokens - len(seq.output) - have,
        )
        if room <= 0:
            return {}
        open_ = [
            (k, br)
            for k, br in enumerate(b.branches)
            if br.pending and br.pending[-1] != ids.end_branch
        ]
        own = [br.fed + br.pending for _, br in open_]
        cands = [
            self.candidates(seq.key, o, o[br.prefix :], b.index, b.anchors[k], ids)
            for (k, br), o in zip(open_, own)
        ]
        if not any(t for c in cands for t in c):
            return {}
        chosen = self.select(
            [b.keys[k] for k, _ in open_], [seq.tokens + o for o in own], cands, base, cost, room
        )
        if (
            len(open_) == 1
            and room > len(chosen[0])
            and all(br.closed for br in b.branches if br is not open_[0][1])
        ):
            # the last open branch, every other closed: below a drafted <|/branch|> the block's
            # <|/para|> can be drafted too (its row gives the first serial token, as the closing
            # step's row would)
            chosen[0] = with_close(chosen[0], ids.end_branch, ids.end_para, room)
        return {k: t for (k, _), t in zip(open_, chosen) if t}

    def candidates(
        self,
        key: Hashable,
        own: Sequence[int],
        content: Sequence[int],
        index: ContextIndex,
        anchors: Sequence[Sequence[int]],
        ids: MarkupIds,
    ) -> list[DraftTree]:
        """Per source, its continuations of the branch's context (the block's prefix + `own`,
        the branch's tokens so far; `content`: those after its forced prefix), without the nodes
        no walk can reach: markup a branch never draws, anything below `<|/branch|>`."""
        context = (index.prefix[-2:] + list(own))[-2:]
        trees = [
            self.trie.match(context, key, CANDIDATES, True, PROMPT_WEIGHT, max_depth=MAX_DEPTH),
            index.drafts(own, CANDIDATES, MAX_DEPTH),
            anchored_drafts(anchors, content),
        ]
        banned = {ids.title, ids.end_title, ids.para, ids.end_para, ids.branch}
        return [
            m.pruned(
                lambda i, m=m: (
                    m.tokens[i] not in banned
                    and (m.parents[i] == ROOT or m.tokens[m.parents[i]] != ids.end_branch)
                )
            )
            for m in trees
        ]

    def select(
        self,
        keys: list[Hashable],
        contexts: list[Sequence[int]],
        candidates: list[list[DraftTree]],
        base_rows: int,
        cost: CostModel,
        max_nodes: int,
    ) -> list[DraftTree]:
        """Per branch (policy stream keys[k], its full context), its merged calibrated draft cut to
        the nodes worth verifying: best first over all branches, the prefix with the most expected
        tokens (base_rows count one each) per unit of cost."""
        for key in keys:
            self._stream(key)
        merged = [
            self.policy.merged(key, ctx, cands)
            for key, ctx, cands in zip(keys, contexts, candidates)
        ]
        ranked = [(p, k, i) for k, (tree, _) in enumerate(merged) for i, p in enumerate(tree.probs)]
        # stable: within a tree the order is best first, parents first, so each tree keeps a prefix
        ranked.sort(key=lambda e: -e[0])
        ranked = ranked[: max(0, max_nodes)]
        best_n, best, gain = 0, base_rows / cost(base_rows), 0.0
        for n, (p, _, _) in enumerate(ranked, 1):
            gain += p
            rate = (base_rows + gain) / cost(base_rows + n)
            if rate > best:
                best_n, best = n, rate
        keep = [0] * len(keys)
        for _, k, _ in ranked[:best_n]:
            keep[k] += 1
        step_cost = cost(base_rows + best_n)
        out = []
        for key, (tree, owners), n in zip(keys, merged, keep):
            self.policy.sent(key, tree.truncated(n), owners[:n], step_cost)
            out.append(tree.truncated(n))
        return out

    def observe(self, key: Hashable, committed: Sequence[int]) -> None:
        """The branch's tokens this step (accepted draft tokens, then its next draw if any)."""
        self._stream(key)
        self.policy.observe(key, committed)


def prefix_texts(tokenizer, prompt: Sequence[int]) -> list[str]:
    """Each prompt token's text (anchored's input)."""
    return [tokenizer.decode([t]) for t in prompt]


def budget_cut(
    tokens: list[list[int]], prefix: list[int], done: list[bool], room: int, checked: int
) -> tuple[list[int] | None, int]:
    """Where the token budget ends inside a block, exactly where decoding without branch drafts
    ends it: after the first step j with sum_k n_k(j) >= room (the tokens left), n_k(j) =
    min(prefix_k + j, length_k) being branch k's tokens (fed and pending) after j steps. Drafting
    branches run ahead of each other, so step j is decided once every unfinished branch has
    passed it. tokens[k]: branch k's so far; done[k]: it ended. Returns (the block's tokens up to
    the cut, or None: not yet; the steps decided so far); the caller's emit cuts at the budget."""
    have = [len(t) for t in tokens]
    going = [h - p for h, p, d in zip(have, prefix, done) if not d]
    known = min(going) if going else max(h - p for h, p in zip(have, prefix))
    for j in range(checked + 1, known + 1):
        n = [min(p + j, h) for p, h in zip(prefix, have)]
        if sum(n) >= room:
            return [t for toks, m in zip(tokens, n) for t in toks[:m]], known
    return None, max(checked, known)


def with_close(tree: DraftTree, end_branch: int, end_para: int, max_nodes: int) -> DraftTree:
    """A copy with `end_para` below each `<|/branch|>` node, while there is room: the block's
    closing row, certain once its parent is accepted (so its parent's estimate)."""
    out = DraftTree(list(tree.tokens), list(tree.parents), list(tree.probs))
    for i, t in enumerate(tree.tokens):
        if t == end_branch and len(out) < max_nodes:
            out.add(end_para, i, tree.probs[i])
    return out
