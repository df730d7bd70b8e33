"""The markup grammar: logits processors that keep ASPD markup well-formed (aspd.md §1.3).

Serial mode (SerialGrammar, one state per sequence, advanced by every emitted token):
- `<|/para|>`, `<|branch|>` and `<|/branch|>` never (the engine writes them);
- outside a titles list, `<|/title|>` and `<|para|>` are banned;
- right after `<|title|>`: no `<|title|>`, `<|/title|>`, `<|para|>` (a title is never empty);
- inside a title: no `<|title|>`, `<|para|>`; after max_title_tokens only `<|/title|>`;
- right after `<|/title|>`: only `<|title|>` (below the branch cap) or `<|para|>`; only `<|para|>`
  after a title the list already holds: a list that repeats a title has ended (the block drops
  repeats, so each would cost its serial steps for nothing; small models loop there);
- EOS is banned inside a titles list (a block that is announced gets decoded);
- at the first serial step after a block `<|title|>` is banned (no block right after a block);
- with an open threshold, the `<|title|>` that opens a list (so a block) is banned where the
  model gives it less probability than the threshold: a block opens where the model is sure of it.
Branches (branch_logits): every markup token but `<|/branch|>` is banned; EOS is mapped to
`<|/branch|>` after the draw (branch_token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..sampling.sampler import first_max
from .markup import MarkupIds

NEG = float("-inf")


@dataclass
class SerialGrammar:
    ids: MarkupIds
    eos: frozenset[int]
    max_titles: int = 8
    max_title_tokens: int = 16
    state: str = "text"  # text | open (just after <|title|>) | title | closed (after <|/title|>) | after_block
    titles: int = 0  # titles in the current list
    title_tokens: int = 0  # tokens of the title being written
    open_threshold: float = 0.0  # P(<|title|>) a list (a block) needs to open; 0: the model's draw
    repeated: bool = False  # the list's last closed title repeats an earlier one: it ends
    _banned_text: list[int] = field(default_factory=list)
    # the list's titles as written, repeats included; the last is the one being written
    listed: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        i = self.ids
        self._always = [i.end_para, i.branch, i.end_branch]
        self._banned_text = self._always + [i.end_title, i.para]

    def copy(self) -> "SerialGrammar":
        g = SerialGrammar(
            self.ids,
            self.eos,
            self.max_titles,
            self.max_title_tokens,
            self.state,
            self.titles,
            self.title_tokens,
            self.open_threshold,
            self.repeated,
        )
        g.listed = [list(t) for t in self.listed]
        return g

    def rule(self, logits: torch.Tensor | None = None) -> tuple[bool, list[int]]:
        """What the grammar allows here: (True, the only allowed ids) or (False, the banned ids).
        `logits`: the row being drawn from, which the open threshold reads."""
        i = self.ids
        if self.state == "closed":
            room = self.titles < self.max_titles and not self.repeated
            return True, [i.para] + ([i.title] if room else [])
        if self.state == "title" and self.title_tokens >= self.max_title_tokens:
            return True, [i.end_title]
        banned = list(self._banned_text if self.state in ("text", "after_block") else self._always)
        if self.state == "after_block" or (logits is not None and self.holds(logits)):
            banned.append(i.title)
        elif self.state == "open":
            banned += [i.title, i.end_title, i.para, *self.eos]
        elif self.state == "title":
            banned += [i.title, i.para, *self.eos]
        return False, banned

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits with what the grammar forbids here at -inf (a copy)."""
        only, ids = self.rule(logits)
        out = logits.clone()
        if only:
            keep = out[ids].clone()
            out.fill_(NEG)
            out[ids] = keep
        else:
            out[ids] = NEG
        return out

    def greedy(self, logits: torch.Tensor) -> int:
        """argmax of apply(logits), without copying the vocabulary row where the grammar only bans
        ids and the plain argmax is not one of them (most steps): that index is then also the first
        maximum of the masked row, so the token is the same, ties included."""
        only, ids = self.rule()
        if only:  # rare (after a title): the plain path
            return int(self.apply(logits).argmax())
        t = first_max(logits)
        held = t == self.ids.title and self.holds(logits)
        return t if t not in ids and not held else int(self.apply(logits).argmax())

    def holds(self, logits: torch.Tensor) -> bool:
        """Whether the open threshold bans the list-opening `<|title|>` in this row."""
        if self.open_threshold <= 0 or self.state != "text":
            return False
        row = logits.float()
        return float(row[self.ids.title] - torch.logsumexp(row, -1)) < math.log(self.open_threshold)

    def advance(self, token: int) -> None:
        i = self.ids
        if token == i.title:
            self.state, self.title_tokens = "open", 0
            self.titles += 1
            self.listed.append([])
        elif token == i.end_title:
            self.state = "closed"
            self.repeated = self.listed[-1] in self.listed[:-1]
        elif token == i.para:
            self._new_list("text")
        elif self.state in ("open", "title"):
            self.state = "title"
            self.title_tokens += 1
            self.listed[-1].append(token)
        else:
            self.state = "text"

    def block_done(self) -> None:
        """The engine closed a block with <|/para|>: the next serial token may not open another."""
        self._new_list("after_block")

    def _new_list(self, state: str) -> None:
        self.state, self.titles, self.repeated = state, 0, False
        self.listed = []


def _branch_banned(ids: MarkupIds) -> list[int]:
    return [ids.title, ids.end_title, ids.para, ids.end_para, ids.branch]


def branch_logits(logits: torch.Tensor, ids: MarkupIds) -> torch.Tensor:
    out = logits.clone()
    out[..., _branch_banned(ids)] = NEG
    return out


def branch_greedy(logits: torch.Tensor, ids: MarkupIds) -> list[int]:
    """Per row of logits [rows, vocab]: argmax of branch_logits(row), all rows in one argmax;
    a row whose plain argmax is allowed (most) needs no masking (see SerialGrammar.greedy)."""
    best = first_max(logits)
    banned = _branch_banned(ids)
    bad = [r for r, t in enumerate(best) if t in banned]
    if bad:
        fixed = branch_logits(logits[bad], ids).argmax(-1).tolist()
        for r, t in zip(bad, fixed):
            best[r] = t
    return best


def branch_token(token: int, ids: MarkupIds, eos: frozenset[int]) -> int:
    """EOS inside a branch ends the branch, not the answer."""
    return ids.end_branch if token in eos else token
