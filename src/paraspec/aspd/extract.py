"""Parallel structure from plain answers: lists and headed sections -> ASPD blocks, validated.

`split(text)` proposes candidates (each a list of segments) by two rules: runs of 2+ list items
("- ", "* ", "1. ", "1) ") and runs of 2+ markdown-headed sections ("## Title"). A branch's content
is the item's exact text, so joining a block's contents with "\n" (markup.to_plain's rule) gives
back the original: integrity is checked, not assumed. Titles come from the item's bold lead
("**Name**:"), its heading, or its first words.

`Pipeline.run` applies the paper's stages to (question, answer) pairs and counts what each keeps:
parsed (>= 1 block of >= 2 branches) -> min_length (the paper's 128-token rule) -> format
(unique titles, branch longer than its title and >= 10 chars) -> integrity (exact round trip)
-> independence (judge votes per block; a rejected block is flattened to serial text, the
candidate survives if a block is left) -> consistency (judge on original vs candidate) ->
selection (the best candidate per answer by DP, then ABN, then APE).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from .data import Block, Branch, Example, Segment, parallel_metrics, plain_text
from .judge import Judge, accept

ITEM = re.compile(r"^(?:[-*+]|\d{1,2}[.)])\s+\S")
HEADING = re.compile(r"^#{1,6}\s+(\S.*)$")
BOLD_LEAD = re.compile(r"^(?:[-*+]|\d{1,2}[.)])\s+\*\*([^*\n]{1,40})\*\*")
MAX_TITLE_WORDS = 4
MIN_BRANCH_CHARS = 10
STAGES = ("input", "parsed", "min_length", "format", "integrity", "independence", "consistency", "selected")


def _title(piece: str, heading: bool) -> str:
    first = piece.split("\n", 1)[0]
    if heading:
        return HEADING.match(first).group(1).strip().strip("*#: ")[:40]
    m = BOLD_LEAD.match(first)
    if m:
        return m.group(1).strip().rstrip(":")
    words = re.sub(r"^(?:[-*+]|\d{1,2}[.)])\s+", "", first)
    words = re.sub(r"[^\w\s'-]", " ", words).split()
    return " ".join(words[:MAX_TITLE_WORDS])


def _runs(lines: list[str], starts: Callable[[str], bool], heading: bool,
          stops: Callable[[str], bool] = lambda s: False) -> list[tuple[int, int, list[int]]]:
    """(first line, end line, item start lines) of each run of 2+ items. A list run continues
    over indented or blank lines; a heading run takes every line up to the next heading of its
    level and ends at a shallower one (`stops`)."""
    runs, i = [], 0
    while i < len(lines):
        if not starts(lines[i]):
            i += 1
            continue
        begin, items, j = i, [i], i + 1
        while j < len(lines):
            ln = lines[j]
            if starts(ln):
                items.append(j)
            elif stops(ln):
                break
            elif not heading and ln.strip() and not ln.startswith((" ", "\t")):
                break
            j += 1
        end = j
        while end > items[-1] + 1 and not lines[end - 1].strip():   # trailing blank lines stay serial
            end -= 1
        if len(items) >= 2:
            runs.append((begin, end, items))
        i = max(j, i + 1)
    return runs


def _segments(lines: list[str], run: tuple[int, int, list[int]], heading: bool) -> list[Segment]:
    begin, end, items = run
    pieces = ["\n".join(lines[a:b]) for a, b in zip(items, items[1:] + [end])]
    block = Block(tuple(Branch(_title(p, heading), p) for p in pieces))
    head = "\n".join(lines[:begin]) + ("\n" if begin else "")
    tail = ("\n" if end < len(lines) else "") + "\n".join(lines[end:])
    return [s for s in (head, block, tail) if s != ""]


def split(text: str) -> list[list[Segment]]:
    """Candidate segmentations of one answer: each list run and each heading run on its own."""
    lines = text.split("\n")
    out = [_segments(lines, run, False) for run in _runs(lines, lambda s: bool(ITEM.match(s)), False)]
    for level in range(1, 7):
        def level_of(s: str) -> int:
            return len(s) - len(s.lstrip("#")) if HEADING.match(s) else 0
        for run in _runs(lines, lambda s: level_of(s) == level, True, lambda s: 0 < level_of(s) < level):
            out.append(_segments(lines, run, True))
    return out


def format_ok(segments: list[Segment]) -> bool:
    for s in segments:
        if isinstance(s, Block):
            titles = [b.title for b in s.branches]
            if len(set(t.casefold() for t in titles)) != len(titles) or any(not t for t in titles):
                return False
            if any(len(b.content) < MIN_BRANCH_CHARS or len(b.content) <= len(b.title) for b in s.branches):
                return False
    return True


@dataclass
class Pipeline:
    judge: Judge
    count: Callable[[str], int] = lambda s: len(s) // 4   # tokens (a tokenizer's length, or chars / 4)
    min_tokens: int = 128
    votes: int = 3
    unanimous: bool = True
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))

    def _keep(self, stage: str, cands: list) -> list:
        self.counts[stage] += len(cands)
        return cands

    def _independent(self, question: str, segments: list[Segment]) -> list[Segment]:
        out: list[Segment] = []
        for i, s in enumerate(segments):
            if isinstance(s, Block):
                pre = plain_text(segments[:i])
                if not accept(self.judge.independent(question, pre, s, self.votes), self.unanimous):
                    s = plain_text([s])   # the paper flattens a rejected group to serial text
            if out and isinstance(s, str) and isinstance(out[-1], str):
                out[-1] += s
            else:
                out.append(s)
        return out

    def run(self, items: list[tuple[str, str, str]]) -> list[Example]:
        """items: (id, question, plain answer). Returns the accepted examples."""
        accepted = []
        for idx, question, answer in items:
            self.counts["input"] += 1
            cands = self._keep("parsed", split(answer))
            cands = self._keep("min_length", cands if self.count(answer) >= self.min_tokens else [])
            cands = self._keep("format", [c for c in cands if format_ok(c)])
            cands = self._keep("integrity", [c for c in cands if plain_text(c) == answer])
            cands = [self._independent(question, c) for c in cands]
            cands = self._keep("independence", [c for c in cands if any(isinstance(s, Block) for s in c)])
            cands = self._keep("consistency", [c for c in cands if accept(
                self.judge.consistent(question, answer, plain_text(c), self.votes), self.unanimous)])
            if cands:
                best = max(cands, key=lambda c: tuple(parallel_metrics(c, self.count).values()))
                self.counts["selected"] += 1
                accepted.append(Example(idx, "extracted", question, best, source="extract"))
        return accepted
