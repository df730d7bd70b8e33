"""Plain text of a marked-up token stream, for streaming: markup and titles never leak.

Branch contents appear when their block closes (the engine emits a block at once), joined by
"\n"; text is held back while it ends in an incomplete UTF-8 character.
"""
from __future__ import annotations

from typing import Sequence

from .markup import TOKENS, MarkupIds, to_plain


def marked_text(tokenizer, ids: Sequence[int], markup: MarkupIds) -> str:
    """The text of `ids` with the markup written out and other special tokens skipped."""
    names = dict(zip(markup.all, TOKENS))
    out, run = [], []
    for t in ids:
        if t in names:
            out += [tokenizer.decode(run), names[t]]
            run = []
        else:
            run.append(t)
    out.append(tokenizer.decode(run))
    return "".join(out)


class PlainDetokenizer:
    """IncrementalDetokenizer's interface (push / flush) over the plain text."""

    def __init__(self, tokenizer, markup: MarkupIds):
        self.tokenizer, self.markup = tokenizer, markup
        self.ids: list[int] = []
        self.sent = 0

    def push(self, new_ids: Sequence[int]) -> str:
        self.ids.extend(new_ids)
        raw = marked_text(self.tokenizer, self.ids, self.markup)
        return "" if raw.endswith("\ufffd") else self._delta(raw)

    def flush(self) -> str:
        return self._delta(marked_text(self.tokenizer, self.ids, self.markup))

    def _delta(self, raw: str) -> str:
        # a title list still being written is held back: parsed before its block closes, the
        # titles would read as plain text, and the text sent can never be taken back
        closed = raw.rfind(TOKENS[5]) + 1 if TOKENS[5] in raw else 0
        opened = raw.find(TOKENS[0], closed)
        plain = to_plain(raw if opened < 0 else raw[:opened])
        delta = plain[self.sent:]
        self.sent = max(self.sent, len(plain))
        return delta
