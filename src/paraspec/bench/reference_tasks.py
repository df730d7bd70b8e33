"""The grounded tasks on the Python language reference (`pydoc_data.topics`, read as text):
retrieval QA about one section of a run of consecutive sections that fit the material budget,
and summaries with quotes of the sections left over (stdlib_tasks.grounded gathers them)."""

from __future__ import annotations

import re
import zlib
from functools import lru_cache
from typing import Iterator

from .task import MATERIAL_CHARS, PY, Task, user_turn

_SUMMARY = (
    "Summarise this section of the Python language reference in 3 to 5 bullet points. Each bullet "
    "must quote its key phrase from the text word for word, in double quotes.\n\n{text}"
)
_QA = (
    "Answer the question using only this passage from the Python language reference, and quote the "
    "sentences that support your answer word for word.\n\n{text}\n\nQuestion: what does the passage say "
    "under the heading {heading}?"
)
# a title line underlined, reST style
_HEADING = re.compile(r"^(\S[^\n]*)\n([*=\-~^])\2{2,}$", re.M)


def _clip(text: str, limit: int = MATERIAL_CHARS) -> str:
    """text cut at the last paragraph break that fits in limit ("" if none does)."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n\n", 0, limit)
    return text[:cut].rstrip() if cut > 0 else ""


@lru_cache(maxsize=1)
def _reference() -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """The language reference as (topic, ((heading, section text), ...)), each section kept once
    (topics overlap: "compound" holds "if", "try", ...)."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    out = []
    for key in sorted(topics):
        text = topics[key]
        marks = list(_HEADING.finditer(text))
        sections = []
        for m, nxt in zip(marks, marks[1:] + [None]):
            body = text[m.start() : nxt.start() if nxt else len(text)].strip()
            if body not in seen:
                seen.add(body)
                sections.append((m.group(1).strip(), body))
        out.append((key, tuple(sections)))
    return tuple(out)


def reference_reading() -> Iterator[Task]:
    """The reference's QA and summary tasks, topic by topic."""
    source = f"Python {PY} language reference, pydoc_data.topics[{{!r}}] (PSF License)"
    for topic, sections in _reference():
        # Runs of consecutive sections that fit become retrieval QA about one of them; the rest are
        # summarised one by one.
        used: set[int] = set()
        start = 0
        while start < len(sections):
            end = start + 1
            while (
                end < len(sections)
                and len("\n\n".join(s for _, s in sections[start : end + 1])) <= MATERIAL_CHARS
            ):
                end += 1
            if end - start >= 2:
                run = sections[start:end]
                heading = max((h for h, _ in run[1:]), key=lambda h: zlib.crc32(h.encode()))
                yield Task(
                    "grounded",
                    f"qa/{topic}#{start}",
                    None,
                    user_turn(_QA.format(text="\n\n".join(s for _, s in run), heading=heading)),
                    256,
                    source.format(topic),
                )
                used.update(range(start, end))
            start = end
        for j, (_, body) in enumerate(sections):
            if j not in used and len(text := _clip(body)) >= 700:
                yield Task(
                    "grounded",
                    f"summary/{topic}#{j}",
                    None,
                    user_turn(_SUMMARY.format(text=text)),
                    256,
                    source.format(topic),
                )
