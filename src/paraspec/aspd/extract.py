"""Parallel structure from plain answers: lists and headed sections -> ASPD blocks, validated.

`split(text)` proposes candidates (each a list of segments) by two rules: runs of 2+ list items
("- ", "* ", "1. ", "1) ") and runs of 2+ markdown-headed sections ("## Title"). A branch's content
is the item's exact text, so joining a block's contents with "\n" (markup.to_plain's rule) gives
back the original. Titles come from the item's bold lead ("**Name**:"), its heading, or its
first words.

`pipeline.Pipeline.run` applies the paper's stages to (id, question, answer) triples and counts what each
keeps: parsed (>= 1 block of >= 2 branches; nothing inside a code fence counts) -> min_length
(the paper's 128-token rule) -> format (unique titles, branch longer than its title and >= 10
chars, a heading branch has a body) -> integrity (`integrity_problem`:
both renderings of the candidate equal the original answer character for character) ->
independence (judge votes per block; a rejected block is flattened to serial text, the
candidate survives if a block is left) -> consistency (`consistency_problem` on the original's
structure, integrity again after flattening, then the judge's votes) -> selection (the best
candidate per answer by DP, then ABN, then APE). The two checks read only the original text and
the candidate, so a splitter (`Pipeline.splitter`) or a stage that changes text fails them.
The judge (judge.py) reads these checks; the pipeline (pipeline.py) runs both.
"""

from __future__ import annotations

import re
from typing import Callable

from .data import Block, Branch, Segment, aspd_text, plain_text
from .markup import TOKENS, to_plain

ITEM = re.compile(r"^(?:[-*+]|\d{1,2}[.)])\s+\S")
HEADING = re.compile(r"^#{1,6}\s+(\S.*)$")
BOLD_LEAD = re.compile(r"^(?:[-*+]|\d{1,2}[.)])\s+\*\*([^*\n]{1,40})\*\*")
MAX_TITLE_WORDS = 4
MIN_BRANCH_CHARS = 10
STAGES = (
    "input",
    "parsed",
    "min_length",
    "format",
    "integrity",
    "independence",
    "consistency",
    "selected",
)

Run = tuple[int, int, list[int]]  # (first line, end line, item start lines)


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


def _runs(
    lines: list[str],
    starts: Callable[[str], bool],
    heading: bool,
    stops: Callable[[str], bool] = lambda s: False,
) -> list[Run]:
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
        # trailing blank lines stay serial
        while end > items[-1] + 1 and not lines[end - 1].strip():
            end -= 1
        if len(items) >= 2:
            runs.append((begin, end, items))
        i = max(j, i + 1)
    return runs


def _level(s: str) -> int:
    return len(s) - len(s.lstrip("#")) if HEADING.match(s) else 0


FENCE = re.compile(r"^\s*(```|~~~)")


def _unfenced(lines: list[str]) -> list[str]:
    """The lines with each code fence's lines (markers included) replaced by a neutral line of
    the same indentation: a "# comment" or "- x" in code is no heading or item, an indented
    fence still continues its list item, and a run never ends inside a fence."""
    out, fenced = [], False
    for ln in lines:
        marker = bool(FENCE.match(ln))
        out.append(ln[: len(ln) - len(ln.lstrip())] + "x" if fenced or marker else ln)
        fenced ^= marker
    return out


def all_runs(lines: list[str]) -> list[tuple[bool, Run]]:
    """(heading?, run) for every list run and every same-level heading run of the text's lines,
    outside code fences."""
    lines = _unfenced(lines)
    out = [(False, r) for r in _runs(lines, lambda s: bool(ITEM.match(s)), False)]
    for level in range(1, 7):
        out += [
            (True, r)
            for r in _runs(
                lines, lambda s: _level(s) == level, True, lambda s: 0 < _level(s) < level
            )
        ]
    return out


def _segments(lines: list[str], run: Run, heading: bool) -> list[Segment]:
    begin, end, items = run
    pieces = ["\n".join(lines[a:b]) for a, b in zip(items, items[1:] + [end])]
    block = Block(tuple(Branch(_title(p, heading), p) for p in pieces))
    head = "\n".join(lines[:begin]) + ("\n" if begin else "")
    tail = ("\n" if end < len(lines) else "") + "\n".join(lines[end:])
    return [s for s in (head, block, tail) if s != ""]


def split(text: str) -> list[list[Segment]]:
    """Candidate segmentations of one answer: each list run and each heading run on its own."""
    lines = text.split("\n")
    return [_segments(lines, run, heading) for heading, run in all_runs(lines)]


def format_ok(segments: list[Segment]) -> bool:
    for s in segments:
        if isinstance(s, Block):
            titles = [b.title for b in s.branches]
            if len(set(t.casefold() for t in titles)) != len(titles) or any(not t for t in titles):
                return False
            if any(
                len(b.content) < MIN_BRANCH_CHARS or len(b.content) <= len(b.title)
                for b in s.branches
            ):
                return False
            if any(
                HEADING.match(b.content) and not b.content.partition("\n")[2].strip()
                for b in s.branches
            ):
                return False  # a heading with no section under it says nothing
    return True


def _first_diff(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def integrity_problem(original: str, segments: list[Segment]) -> str | None:
    """None when the candidate's plain text and to_plain of its ASPD markup are both the original
    answer, character for character; else where they first differ."""
    for name, text in (
        ("plain text", plain_text(segments)),
        ("to_plain(markup)", to_plain(aspd_text(segments))),
    ):
        if text != original:
            i = _first_diff(text, original)
            return f"{name} differs from the original at char {i}: {text[i : i + 24]!r} != {original[i : i + 24]!r}"
    return None


def _words(s: str) -> str:
    return " ".join(re.sub(r"[^\w'-]+", " ", s).casefold().split())


def consistency_problem(original: str, segments: list[Segment]) -> str | None:
    """None when the candidate's structure is the original's: every block is exactly one list or
    heading run of the original (same first and last line, one branch per item, no item hidden
    inside a branch or left outside), stands on whole lines between serial text, and has
    non-empty, unique titles that its branches' first lines restate. The offsets are read off
    the original, so a candidate whose text is not the original's fails first."""
    if plain_text(segments) != original:
        return "the candidate's text is not the original's (integrity)"
    lines = original.split("\n")
    runs = {r[2][0]: (heading, r) for heading, r in all_runs(lines)}
    pos, blocks = 0, 0
    for i, seg in enumerate(segments):
        if isinstance(seg, str):
            if not seg:
                return f"segment {i} is empty serial text"
            if i and isinstance(segments[i - 1], str):
                return f"segments {i - 1} and {i} are both serial text (one segment)"
            pos += len(seg)
            continue
        blocks += 1
        if len(seg.branches) < 2:
            return f"block {blocks} has {len(seg.branches)} branch (a block has 2 or more)"
        after = pos + len(plain_text([seg]))
        if (pos and original[pos - 1] != "\n") or original[after : after + 1] not in ("", "\n"):
            return f"block {blocks} does not stand on whole lines of the original"
        starts, p = [], pos
        for b in seg.branches:
            starts.append(original.count("\n", 0, p))
            p += len(b.content) + 1
        end = original.count("\n", 0, p - 1) + 1
        heading, run = runs.get(starts[0], (None, None))
        if run is None:
            return f"block {blocks} starts at line {starts[0] + 1}, where the original has no list or heading run"
        if run[2] != starts or run[1] != end:
            return (
                f"block {blocks} has branches at lines {[s + 1 for s in starts]} (to line {end}); the original's "
                f"{'sections' if heading else 'list'} there has items at lines {[s + 1 for s in run[2]]} "
                f"(to line {run[1]})"
            )
        titles = [b.title for b in seg.branches]
        if any(not t.strip() or "\n" in t or any(m in t for m in TOKENS) for t in titles):
            return f"block {blocks} has an empty title or one with a newline or markup: {titles}"
        if len({t.strip().casefold() for t in titles}) != len(titles):
            return f"block {blocks} repeats a title: {titles}"
        for b in seg.branches:
            if _words(b.title) not in _words(b.content.split("\n", 1)[0]):
                return (
                    f"block {blocks}: title {b.title!r} is not restated by its branch's first line"
                )
        pos = after
    if not blocks:
        return "no block"
    return None
