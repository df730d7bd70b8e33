"""ASPD decoding: the branch state of one sequence and its steps, on the engine's one forward path.
A decode mode (decoding/mode.py): AspdDecoder is the plugin, AspdState one sequence's state.

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

Every fed token stays in the cache (KVCache.commit keeps all rows; slots are interleaved by
step, which attention does not see); nothing is re-prefilled. The block's tokens are emitted
when it closes, in the flattened training order (branch 1, branch 2, ..., `<|/para|>`), so that
the output ids and layout.layout() describe exactly what the cache holds. Branch k alone sees
what a plain decode of prefix + branch k sees (same keys, same positions): with the compiled
kernels its logits have the same bits (tests/aspd/test_exactness.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from ..decoding.mode import ModePlugin
from ..decoding.verify import Query
from ..errors import RequestError
from ..sequence import SequenceState
from .grammar import SerialGrammar, branch_greedy, branch_logits, branch_token
from .markup import MarkupIds
from .params import AspdParams
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
        self.trie = None if drafter is None else drafter.trie
        self.force: Forcer | None = None

    def new_sequence(self, tokenizer, params) -> "AspdState":
        if params.logprobs is not None:
            raise RequestError("logprobs are not available with plugin aspd; drop logprobs or the plugin")
        return AspdState(self, MarkupIds.from_tokenizer(tokenizer), tokenizer)


@dataclass
class Branch:
    title: list[int]
    fed: list[int] = field(default_factory=list)       # tokens in the cache, in order
    slots: list[int] = field(default_factory=list)     # their KV slots
    pending: list[int] = field(default_factory=list)   # drawn / forced, fed by the next forward
    content: int = 0                                   # tokens drawn by the model
    closed: bool = False                               # its <|/branch|> is in the cache


@dataclass
class Block:
    branches: list[Branch]
    para_pos: int = -1
    para_slot: int = -1       # -1 until the first step has fed <|para|>
    owner: list[int] = field(default_factory=list)     # the last query's rows: branch, or -1


class AspdState:
    """One sequence's ASPD state: the serial grammar, the titles being written, the open block."""

    def __init__(self, decoder: AspdDecoder, ids: MarkupIds, tokenizer):
        p = decoder.params
        self.decoder, self.ids, self.tokenizer = decoder, ids, tokenizer
        self.eos = eos = frozenset(tokenizer.eos_token_ids)
        self.grammar = SerialGrammar(ids, eos, p.max_branches, p.max_title_tokens)
        self.titles: list[list[int]] = []
        self.block: Block | None = None
        self.blocks = self.branches = self.parallel_steps = 0
        self.last_slots: list[int] = []   # KV slot of each token of the last closed block, flattened order

    @property
    def parallel(self) -> bool:
        return self.block is not None

    def _forced(self, context: Callable[[], Sequence[int]]) -> int | None:
        """The test hook's token; `context` builds the tokens it sees only when a hook is set."""
        return None if self.decoder.force is None else self.decoder.force(context())

    # ---------------------------------------------------------------------------- serial

    def advance(self, token: int) -> None:
        """A serial token was drawn: grammar, titles, and the switch to parallel mode."""
        ids = self.ids
        if token == ids.title:
            self.titles.append([])
        elif self.grammar.state in ("open", "title") and token != ids.end_title:
            self.titles[-1].append(token)
        self.grammar.advance(token)
        if token == ids.para:
            self._open_block()

    def _open_block(self) -> None:
        unique: list[list[int]] = []
        for t in self.titles:
            if t not in unique and len(unique) < self.decoder.params.max_branches:
                unique.append(t)
        self.titles = []
        colon = self.ids.colon_space[:1]    # ":"; the space goes with the next word (BPE)
        self.block = Block([Branch(t, pending=[self.ids.branch, *t, *colon]) for t in unique])
        self.blocks += 1
        self.branches += len(unique)

    def detokenizer(self) -> PlainDetokenizer:
        return PlainDetokenizer(self.tokenizer, self.ids)

    def draw(self, seq: SequenceState, logits: torch.Tensor, pending: list[int]) -> int:
        """A serial token of the engine's step, the grammar applied (the engine records it in the
        sampler). Every token the engine's walk draws is emitted, so the state advances as it goes."""
        return self._draw_serial(seq, logits, lambda: [*seq.tokens, *pending])

    def ends_run(self, token: int) -> bool:
        return token == self.ids.para      # a draft never runs past <|para|>: the block starts there

    def _draw_serial(self, seq: SequenceState, logits: torch.Tensor, context: Callable[[], Sequence[int]]) -> int:
        t = self._forced(context)
        if t is None:    # greedy: the grammar's argmax without a masked copy of the row where it can
            t = self.grammar.greedy(logits) if seq.sampler.argmax_suffices \
                else seq.sampler.draw(self.grammar.apply(logits))
        self.advance(t)
        return t

    # -------------------------------------------------------------------------- parallel

    def query(self, seq: SequenceState) -> Query | None:
        """This step's rows of the open block (see the module doc); None in serial mode."""
        if self.block is None:
            return None
        b, length = self.block, seq.cache.length
        first = b.para_slot < 0
        if first:
            b.para_pos = length
        mask_from = length if first else b.para_slot + 1
        new0 = length - mask_from         # column of the first new row
        # a branch's pending tokens are consecutive rows; first the rows, then the mask (numpy:
        # a step builds it with a few slice writes per branch, not per row)
        tokens: list[int] = [self.ids.para] if first else []
        positions: list[int] = [length] if first else []
        owner: list[int] = [-1] if first else []     # per row: its branch, or -1 (<|para|>, <|/para|>)
        spans: list[tuple[Branch, int, int]] = []
        for k, br in enumerate(b.branches):
            if br.pending:
                spans.append((br, len(tokens), len(tokens) + len(br.pending)))
                start = b.para_pos + 1 + len(br.fed)
                positions += range(start, start + len(br.pending))
                tokens += br.pending
                owner += [k] * len(br.pending)
        closing = all(br.closed or br.pending == [self.ids.end_branch] for br in b.branches)
        if closing and not first:
            positions.append(b.para_pos + 1 + sum(len(br.fed) for br in b.branches) + len(owner))
            tokens.append(self.ids.end_para)
            owner.append(-1)
        n = len(tokens)
        mask = np.zeros((n, new0 + n), dtype=bool)
        if first:
            mask[0, new0] = True           # <|para|> sees itself (and the slots before mask_from)
        elif owner and owner[-1] < 0:
            mask[n - 1, :new0 + n] = True  # <|/para|> sees everything before it
        for br, r0, r1 in spans:
            if br.slots:                   # its own committed slots
                mask[r0:r1, np.asarray(br.slots) - mask_from] = True
            if r1 - r0 == 1:               # its new rows, causal (one row: itself)
                mask[r0, new0 + r0] = True
            else:
                mask[r0:r1, new0 + r0:new0 + r1] = np.tri(r1 - r0, dtype=bool)
            if first:
                mask[r0:r1, new0] = True   # the <|para|> row
        mask = torch.from_numpy(mask)
        b.owner = owner
        # logits: each branch's last row unless it feeds <|/branch|>, and <|/para|>'s
        rows = [r1 - 1 for br, r0, r1 in spans if tokens[r1 - 1] != self.ids.end_branch]
        if tokens and tokens[-1] == self.ids.end_para and owner[-1] < 0:
            rows.append(n - 1)
        return Query(tokens, positions, mask, [{}], 0, mask_from=mask_from, rows=rows)

    def accept(self, seq: SequenceState, q: Query, logits: torch.Tensor, forward_s: float) -> list[int]:
        """Commit the step's rows, draw each open branch's next token; the tokens to emit (the
        flattened block and the next serial token) once the block closes, else []."""
        t0 = time.perf_counter()
        b, ids, cache = self.block, self.ids, seq.cache
        owner = b.owner
        start = cache.length
        cache.commit(range(len(q.tokens)))
        if b.para_slot < 0:
            b.para_slot = start
        for r, (k, t) in enumerate(zip(owner, q.tokens)):
            if k >= 0:
                br = b.branches[k]
                br.fed.append(t)
                br.slots.append(start + r)
                br.closed = t == ids.end_branch
                br.pending = []
        self.parallel_steps += 1
        drawn = 0
        out: list[int] = []
        # greedy: every branch row's token in one argmax (the same tokens as one draw per row)
        greedy = None
        if seq.sampler.argmax_suffices:
            n_branch = len(q.rows) - (owner[q.rows[-1]] < 0 if q.rows else 0)
            greedy = branch_greedy(logits[:n_branch], ids) if n_branch else []
        for row, r in enumerate(q.rows):
            k = owner[r]
            if k < 0:                      # <|/para|>: back to serial mode
                self.grammar.block_done()
                self.last_slots = [s for br in b.branches for s in br.slots] + [start + r]
                out = self.flattened() + [ids.end_para]
                self.block = None
                t = self._draw_serial(seq, logits[row], lambda: seq.tokens + out)
                seq.sampler.append(t)
                out.append(t)
                break
            br = b.branches[k]
            t = self._forced(lambda: seq.tokens + self._context(br))
            if t is None:
                t = greedy[row] if greedy is not None else seq.sampler.draw(branch_logits(logits[row], ids))
                t = branch_token(t, ids, self.eos)
                br.content += 1
            if br.content >= self.decoder.params.max_branch_tokens:
                t = ids.end_branch
            seq.sampler.append(t)
            br.pending = [t]
            drawn += 1
        seq.stats.observe_step(0, max(drawn, 1), 0.0, forward_s + time.perf_counter() - t0)
        if not out and len(seq.output) + sum(len(br.fed) + len(br.pending) for br in b.branches) >= seq.max_tokens:
            out = self.flattened(with_pending=True)    # the budget ends inside the block: _emit cuts it
            self.block = None
        return out

    def _context(self, br: Branch) -> list[int]:
        """What a branch sees after the sequence's tokens: <|para|> is already in seq.tokens."""
        return br.fed

    def flattened(self, with_pending: bool = False) -> list[int]:
        return [t for br in self.block.branches for t in br.fed + (br.pending if with_pending else [])]

    def stats(self, seq: SequenceState) -> dict:
        """Blocks, branches and parallel steps, and the raw answer with its markup (`.text` is plain)."""
        return {"aspd_blocks": self.blocks, "aspd_branches": self.branches,
                "aspd_parallel_steps": self.parallel_steps,
                "aspd_raw_text": marked_text(self.tokenizer, seq.output, self.ids)}
