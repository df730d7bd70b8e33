"""Plain text of a marked-up token stream, for streaming: markup and titles never leak.

The text a user gets, streamed or not, is exactly markup.to_plain of the raw markup text
(marked_text of the output ids). Serial text streams as it is decoded; from the first markup
token after the last `<|/para|>` (a titles list, then its block) the text is held back until the
block closes: parsed earlier, a titles list would read as plain text, and what is sent can never
be taken back. Branch contents appear when their block closes (the engine emits a block at once),
joined by "\n"; text is held back while it ends in an incomplete UTF-8 character.
"""

from __future__ import annotations

from typing import Sequence

from ..model.tokenizer import IncrementalDetokenizer
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
    """IncrementalDetokenizer's interface (push / flush) over the plain text. Incremental: the
    answer is cut after each `<|/para|>` (to_plain of a text is the concatenation of to_plain of
    such pieces), a piece's serial text streams through an IncrementalDetokenizer, and only the
    piece's markup part is parsed, once, when its block closes or the answer ends."""

    def __init__(self, tokenizer, markup: MarkupIds):
        self.tokenizer, self.markup = tokenizer, markup
        self._marks = frozenset(markup.all)
        self._piece: list[int] = []  # ids since the last <|/para|>
        self._serial = IncrementalDetokenizer(tokenizer)  # the piece's serial text, streaming
        self._serial_sent = 0  # characters of the piece's serial text sent
        self._held = False  # the piece has markup: the rest is held back

    def push(self, new_ids: Sequence[int]) -> str:
        out: list[str] = []
        for t in new_ids:
            self._piece.append(t)
            if not self._held and t not in self._marks:
                out.append(self._sent(self._serial.push([t])))
            elif not self._held:  # the first markup token: the serial text is complete
                self._held = True
                out.append(self._sent(self._serial.flush()))
            if t == self.markup.end_para:  # the block closed: the piece is final
                out.append(self._close())
        return "".join(out)

    def flush(self) -> str:
        """The rest of to_plain(raw): an unfinished titles list or block as markup.parse reads it."""
        return self._close() if self._held else self._sent(self._serial.flush())

    def _sent(self, text: str) -> str:
        self._serial_sent += len(text)
        return text

    def _close(self) -> str:
        plain = to_plain(marked_text(self.tokenizer, self._piece, self.markup))
        delta = plain[self._serial_sent :]
        self._piece, self._serial_sent, self._held = [], 0, False
        self._serial = IncrementalDetokenizer(self.tokenizer)
        return delta
