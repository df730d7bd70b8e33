"""ASPD decoding: the branch state of one sequence and its steps, on the engine's one forward path.
A decode mode (decoding/contract/mode.py): AspdDecoder is the plugin, AspdState one sequence's state.

Serial mode is the engine's ordinary step (the configured drafter included) with the markup
grammar on every draw. When `<|para|>` is drawn, the titles of the list just written (unique,
at most max_branches) open a block, decoded in the same sequence and KV cache:

  step 1   rows: `<|para|>` at position p (a serial token), then per branch k its forced prefix
           `<|branch|>` + title_k + ":" as a causal chain at positions p + 1, p + 2, ...
           (each chain sees `<|para|>` and itself, never another chain);
  step j   rows: each open branch's last drawn token, at p + 1 + its length so far, seeing the
           slots [0, p] and its own branch's slots (a mask over the committed slots from p + 1
           on: SeqInput.mask_from); a branch that drew `<|/branch|>` (or EOS, mapped to it)
           feeds it and stops;
  last     with the last `<|/branch|>` rows, `<|/para|>` at p + 1 + (all branch tokens): a serial
           row that sees everything. Its logits give the next serial token.
           (block_query.py builds each step's rows and mask.)
  drafts   greedy, with a drafter that keeps a trie: below each open branch's last fed token its
           own trie draft (branch_drafts.py), node i at that token's position + depth(i), seeing
           what its branch's rows see plus its ancestors; each branch is verified by the
           acceptance walk with the branch grammar, its rejected rows dropped (KVCache.commit).
           Below the last open branch's drafted `<|/branch|>`, `<|/para|>` may be drafted too.

Every fed token stays in the cache (KVCache.commit keeps every row but rejected draft rows;
slots are interleaved by step); nothing is re-prefilled. A `<|/para|>` row takes the block's
slots in the flattened order (SeqInput.key_order: the csrc attention's fp32 sums depend on the
order), and when the block closes its KV moves into that order, so later rows take it so too.
The block's tokens are emitted when it closes, in the flattened training order (branch 1,
branch 2, ..., `<|/para|>`), so that the output ids and layout.layout() describe exactly what
the cache holds. Branch k alone sees
what a plain decode of prefix + branch k sees (same keys, same positions): with the compiled
kernels its logits have the same bits (tests/aspd/test_exactness.py).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ..decoding.contract.acceptance import walk
from ..decoding.contract.mode import ModePlugin
from ..decoding.contract.proposer import StepContext
from ..decoding.contract.tree import DraftTree
from ..decoding.contract.verify import Query
from ..errors import RequestError
from ..sequence import SequenceState
from .block import Block, Branch, Span, flatten_slots
from .block_query import block_query
from .branch_drafts import MAX_DEPTH, BranchDrafter, budget_cut, prefix_texts
from .context_match import ContextIndex, anchored
from .grammar import SerialGrammar, branch_greedy, branch_logits, branch_token
from .markup import MarkupIds
from .params import AspdParams
from .serial_drafts import SerialDrafts
from .stream import PlainDetokenizer, marked_text

# a test hook: (context tokens) -> a token that replaces the model's draw, or None
Forcer = Callable[[Sequence[int]], "int | None"]


class AspdDecoder(ModePlugin):
    """What plugin 'aspd' builds: the ASPD settings and the serial segments' drafter (or None).
    `force` is a test hook that teacher-forces tokens (the forward, masks and cache stay the real ones)."""

    name = "aspd"

    def __init__(self, params: AspdParams, drafter=None):
        self.params = params
        self.drafter = drafter
        self.force: Forcer | None = None

    @property
    def drafter(self):
        """The serial steps' drafter, its drafts cut to what serial mode accepts (serial_drafts.py)."""
        return self._drafter

    @drafter.setter
    def drafter(self, drafter) -> None:
        self._drafter = None if drafter is None else SerialDrafts(drafter)
        self.trie = getattr(drafter, "trie", None)  # lookahead keeps none
        # a hybrid's (saved with the trie)
        self.output_memory = getattr(drafter, "output_memory", None)
        # the branches' drafts: from the same trie, greedy only (branch_drafts.py)
        self.branch_drafter = (
            BranchDrafter(self.trie)
            if self.trie is not None and self.params.branch_drafts
            else None
        )

    def new_sequence(self, tokenizer, params) -> "AspdState":
        if params.logprobs is not None:
            raise RequestError(
                "logprobs are not available with plugin aspd; drop logprobs or the plugin"
            )
        ids = MarkupIds.from_tokenizer(tokenizer)
        if self._drafter is not None:
            self._drafter.ids = ids
        return AspdState(self, ids, tokenizer)


class AspdState:
    """One sequence's ASPD state: the serial grammar, the titles being written, the open block."""

    def __init__(self, decoder: AspdDecoder, ids: MarkupIds, tokenizer):
        p = decoder.params
        self.decoder, self.ids, self.tokenizer = decoder, ids, tokenizer
        self.eos = eos = frozenset(tokenizer.eos_token_ids)
        self.grammar = SerialGrammar(
            ids, eos, p.max_branches, p.max_title_tokens, open_threshold=p.open_threshold
        )
        self.block: Block | None = None
        self.blocks = self.branches = self.parallel_steps = 0
        self.branch_draft_tokens = self.branch_accepted = self.drafted_closes = 0
        # KV slot of each token of the last closed block, flattened order
        self.last_slots: list[int] = []
        self._prompt_texts: list[str] | None = None

    @property
    def parallel(self) -> bool:
        return self.block is not None

    def _forced(self, context: Callable[[], Sequence[int]]) -> int | None:
        """The test hook's token; `context` builds the tokens it sees only when a hook is set."""
        return None if self.decoder.force is None else self.decoder.force(context())

    # ---------------------------------------------------------------------------- serial

    def advance(self, token: int) -> None:
        """A serial token was drawn: grammar, titles, and the switch to parallel mode."""
        titles = self.grammar.listed  # the list's titles (the grammar forgets them at <|para|>)
        self.grammar.advance(token)
        if token == self.ids.para:
            self._open_block(titles)

    def _open_block(self, titles: list[list[int]]) -> None:
        unique: list[list[int]] = []
        for t in titles:
            if t not in unique and len(unique) < self.decoder.params.max_branches:
                unique.append(t)
        colon = self.ids.colon_space[:1]  # ":"; the space goes with the next word (BPE)
        self.block = Block(
            [
                Branch(t, pending=[self.ids.branch, *t, *colon], prefix=len(t) + 1 + len(colon))
                for t in unique
            ]
        )
        self.blocks += 1
        self.branches += len(unique)

    def detokenizer(self) -> PlainDetokenizer:
        return PlainDetokenizer(self.tokenizer, self.ids)

    def draw(self, seq: SequenceState, logits: torch.Tensor, pending: list[int]) -> int:
        """A serial token of the engine's step, the grammar applied (the engine records it in the
        sampler). Every token the engine's walk draws is emitted, so the state advances as it goes."""
        return self._draw_serial(seq, logits, lambda: [*seq.tokens, *pending])

    def ends_run(self, token: int) -> bool:
        return token == self.ids.para  # a draft never runs past <|para|>: the block starts there

    def _draw_serial(
        self, seq: SequenceState, logits: torch.Tensor, context: Callable[[], Sequence[int]]
    ) -> int:
        t = self._forced(context)
        if t is None:  # greedy: the grammar's argmax without a masked copy of the row where it can
            t = (
                self.grammar.greedy(logits)
                if seq.sampler.argmax_suffices
                else seq.sampler.draw(self.grammar.apply(logits))
            )
        self.advance(t)
        return t

    # -------------------------------------------------------------------------- parallel

    def query(self, seq: SequenceState, ctx: StepContext | None = None) -> Query | None:
        """This step's rows of the open block (see the module doc, block_query.py); None in serial mode."""
        b = self.block
        if b is None:
            return None
        closing = all(br.closed or br.pending == [self.ids.end_branch] for br in b.branches)
        first_rows = 1 if b.para_slot < 0 else 0  # <|para|>, fed by the block's first step
        trees = {} if closing else self._branch_drafts(seq, ctx, first_rows)
        return block_query(b, self.ids, seq.cache.length, trees, closing)

    def _branch_drafts(
        self, seq: SequenceState, ctx: StepContext | None, base: int
    ) -> dict[int, DraftTree]:
        """Per open branch, its trie draft worth verifying (BranchDrafter.block_drafts); none for
        sampled branches or without a trie."""
        d, b = self.decoder.branch_drafter, self.block
        if d is None or ctx is None or not seq.sampler.argmax_suffices:
            return {}
        if b.keys is None:  # the block's first step (seq.tokens ends with <|para|>)
            b.stream = (seq.key, self.blocks)
            b.keys = d.open_block(b.stream, len(b.branches))
            b.index = ContextIndex(seq.tokens)
            if self._prompt_texts is None:
                self._prompt_texts = prefix_texts(self.tokenizer, seq.prompt)
            b.anchors = [
                anchored(seq.prompt, self._prompt_texts, self.tokenizer.decode(br.title), MAX_DEPTH)
                for br in b.branches
            ]
        return d.block_drafts(b, seq, ctx.cost, base, self.ids)

    def accept(
        self, seq: SequenceState, q: Query, logits: torch.Tensor, forward_s: float
    ) -> list[int]:
        """Verify each branch's draft (its accepted rows stay in the cache, the rest are dropped)
        and draw each open branch's next token; the tokens to emit (the flattened block and the
        next serial token) once the block closes, else []."""
        t0 = time.perf_counter()
        b, ids, cache = self.block, self.ids, seq.cache
        start = cache.length
        if b.para_slot < 0:
            b.para_slot = start
        self.parallel_steps += 1
        # greedy: every branch row's token in one argmax (the same tokens as one draw per row)
        greedy = None
        if seq.sampler.argmax_suffices:
            n_branch = len(q.rows) - (b.owner[q.rows[-1]] < 0 if q.rows else 0)
            greedy = branch_greedy(logits[:n_branch], ids) if n_branch else []
        at = {r: i for i, r in enumerate(q.rows)}
        drawn = drafted = 0
        dropped: set[int] = set()
        accepted: list[list[int]] = []
        close = q.rows[-1] if q.rows and b.owner[q.rows[-1]] < 0 else None  # the <|/para|> row
        for s in b.spans:
            br = b.branches[s.k]
            br.fed += q.tokens[s.r0 : s.d0]
            br.closed = br.fed[-1] == ids.end_branch
            br.pending = []
            n0 = len(br.fed)
            nodes, end = ([], None) if br.closed else self._walk(seq, br, s, logits, greedy, at)
            drawn += 0 if br.closed else len(nodes) + len(br.pending)
            # the branch's tokens this step
            if b.keys is not None and n0 < len(br.fed) + len(br.pending):
                self.decoder.branch_drafter.observe(b.keys[s.k], br.fed[n0:] + br.pending)
            if s.tree:
                drafted += len(s.tree)
                dropped |= set(range(s.d0, s.end)) - {
                    s.d0 + i for i in nodes + ([end] if end is not None else [])
                }
            if end is not None:
                close = s.d0 + end
                self.drafted_closes += 1
            accepted.append(nodes)
        keep = [r for r in range(len(q.tokens)) if r not in dropped]
        cache.commit(keep)
        slot = {r: start + i for i, r in enumerate(keep)}
        for s, nodes in zip(b.spans, accepted):
            b.branches[s.k].slots += [slot[r] for r in range(s.r0, s.d0)] + [
                slot[s.d0 + i] for i in nodes
            ]
        self.branch_draft_tokens += drafted
        self.branch_accepted += sum(len(n) for n in accepted)
        out: list[int] = []
        if close is not None:  # <|/para|>: back to serial mode
            r = close
            self.grammar.block_done()
            self.last_slots = flatten_slots(
                b, cache, [s for br in b.branches for s in br.slots] + [slot[r]]
            )
            out = self.flattened() + [ids.end_para]
            self._close_block()
            t = self._draw_serial(seq, logits[at[r]], lambda: seq.tokens + out)
            seq.sampler.append(t)
            out.append(t)
        seq.stats.observe_step(drafted, max(drawn, 1), 0.0, forward_s + time.perf_counter() - t0)
        return out or self._budget_cut(seq)

    def _walk(
        self,
        seq: SequenceState,
        br: Branch,
        s: Span,
        logits: torch.Tensor,
        greedy: list[int] | None,
        at: dict[int, int],
    ) -> tuple[list[int], int | None]:
        """The acceptance walk down branch br's draft (tree row 0: its last fed token), with the
        branch grammar on every draw: the draft nodes accepted (br.fed gets their tokens, br.pending
        the last draw, none when an accepted node closed the branch), and the node of a drafted
        <|/para|> below an accepted <|/branch|> (the block closes: with_close), or None."""
        ids, cap = self.ids, self.decoder.params.max_branch_tokens

        def draw(tree_row: int) -> int:
            r = at[s.d0 - 1 + tree_row]
            t = self._forced(lambda: seq.tokens + self._context(br))
            if t is None:
                t = (
                    greedy[r]
                    if greedy is not None
                    else seq.sampler.draw(branch_logits(logits[r], ids))
                )
                t = branch_token(t, ids, self.eos)
                br.content += 1
            if br.content >= cap:
                t = ids.end_branch
            seq.sampler.append(t)
            br.fed.append(t)  # for now: the hook sees the path so far
            return t

        children = s.tree.children()
        acc = walk(children, draw, len(s.tree) + 1, lambda t: t == ids.end_branch)
        nodes = acc.nodes
        last = br.fed.pop()
        if (
            last == ids.end_branch
            and (child := children[nodes[-1] + 1 if nodes else 0].get(last)) is not None
        ):
            nodes.append(child)  # a drafted <|/branch|>: fed, the branch is closed
            br.fed.append(last)
            br.closed = True
            end = children[child + 1].get(ids.end_para)  # drafted only below the last open branch
            if end is not None:
                return nodes, end
        else:
            br.pending = [last]
        return nodes, None

    def _budget_cut(self, seq: SequenceState) -> list[int]:
        """The block cut where the token budget ends (branch_drafts.budget_cut), else []."""
        b = self.block
        if b is None:
            return []
        done = [br.closed or br.pending == [self.ids.end_branch] for br in b.branches]
        cut, b.checked = budget_cut(
            [br.fed + br.pending for br in b.branches],
            [br.prefix for br in b.branches],
            done,
            seq.max_tokens - len(seq.output),
            b.checked,
        )
        if cut is not None:
            self._close_block()
        return cut or []

    def _close_block(self) -> None:
        if self.block.keys is not None:
            self.decoder.branch_drafter.close_block(self.block.stream)
        self.block = None

    def _context(self, br: Branch) -> list[int]:
        """What a branch sees after the sequence's tokens: <|para|> is already in seq.tokens."""
        return br.fed

    def flattened(self, with_pending: bool = False) -> list[int]:
        return [
            t for br in self.block.branches for t in br.fed + (br.pending if with_pending else [])
        ]

    def stats(self, seq: SequenceState) -> dict:
        """Blocks, branches and parallel steps, and the raw answer with its markup (`.text` is plain)."""
        return {
            "aspd_blocks": self.blocks,
            "aspd_branches": self.branches,
            "aspd_parallel_steps": self.parallel_steps,
            "aspd_branch_draft_tokens": self.branch_draft_tokens,
            "aspd_branch_accepted_tokens": self.branch_accepted,
            "aspd_drafted_closes": self.drafted_closes,
            "aspd_raw_text": marked_text(self.tokenizer, seq.output, self.ids),
        }
