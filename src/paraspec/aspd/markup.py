"""The ASPD markup: six special tokens, their ids in a tokenizer, and the text layout.

An answer alternates serial text and parallel blocks (no newlines added around markup):

    serial<|title|>T1<|/title|><|title|>T2<|/title|><|para|><|branch|>T1: C1<|/branch|><|branch|>T2: C2<|/branch|><|/para|>serial

Each branch restates its title and ": " (a forced prefix at inference). The plain text a user sees
drops the titles list and the markup and joins the branch contents (without "T: ") with "\n".
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ModelLoadError

logger = logging.getLogger("paraspec.aspd")

TITLE, END_TITLE, PARA = "<|title|>", "<|/title|>", "<|para|>"
BRANCH, END_BRANCH, END_PARA = "<|branch|>", "<|/branch|>", "<|/para|>"
TOKENS: tuple[str, ...] = (TITLE, END_TITLE, PARA, BRANCH, END_BRANCH, END_PARA)
TITLE_SEP = ": "


@dataclass(frozen=True)
class MarkupIds:
    title: int
    end_title: int
    para: int
    branch: int
    end_branch: int
    end_para: int
    colon_space: list[int]  # ids of ": ", the end of every branch's forced prefix

    @property
    def all(self) -> tuple[int, ...]:
        return (self.title, self.end_title, self.para, self.branch, self.end_branch, self.end_para)

    @classmethod
    def from_tokenizer(cls, tok) -> "MarkupIds":
        ids = [tok.backend.token_to_id(s) for s in TOKENS]
        missing = [s for s, i in zip(TOKENS, ids) if i is None]
        if missing:
            raise ModelLoadError(
                f"the model's tokenizer lacks the ASPD tokens {' '.join(missing)}; use a "
                "model trained for ASPD (`paraspec aspd train`), or drop plugin 'aspd'"
            )
        return cls(*ids, colon_space=tok.encode(TITLE_SEP, add_bos=False))


def add_markup_tokens(tokenizer, weights: dict, loaded=None) -> MarkupIds:
    """Add the six tokens to `tokenizer` (special: never split, skipped when decoding with
    skip_special) and grow `tok_embeddings` (and an untied `lm_head`) so that every new id has a
    row, initialised to the mean embedding (the usual choice for new tokens: a neutral start).
    Idempotent. `loaded` (a checkpoint.LoadedModel), when given, gets args with the new vocab_size."""
    from tokenizers import AddedToken

    if any(tokenizer.backend.token_to_id(s) is None for s in TOKENS):
        tokenizer.backend.add_special_tokens(
            [AddedToken(s, special=True, normalized=False) for s in TOKENS]
        )
        tokenizer.vocab_size = tokenizer.backend.get_vocab_size()
        tokenizer.__dict__.pop("max_token_chars", None)  # a cached_property over the vocabulary
    ids = MarkupIds.from_tokenizer(tokenizer)
    rows = max(ids.all) + 1
    for name in ("tok_embeddings", "lm_head"):
        if name in weights:
            weights[name] = _grown(weights[name], rows)
    if loaded is not None and loaded.args.vocab_size < rows:
        loaded.args = dataclasses.replace(loaded.args, vocab_size=rows)
    return ids


def _grown(w, rows: int):
    """`w` with rows appended up to `rows`, each the mean of the existing rows."""
    from ..model.ggml import GGUFWeight, dequantize

    if w.shape[0] >= rows:
        return w
    if isinstance(w, GGUFWeight):  # stored blocks: the grown matrix goes back to float
        logger.info("paraspec: %s embeddings dequantised to add the ASPD tokens", w.kind)
        w = dequantize(w)
    if isinstance(w, np.ndarray):
        w = torch.from_numpy(np.array(w, dtype=np.float32))
    mean = w.float().mean(0, keepdim=True).to(w.dtype)
    return torch.cat([w, mean.expand(rows - w.shape[0], -1)], 0).contiguous()


# ---------------------------------------------------------------------------------------- text


@dataclass(frozen=True)
class Branch:
    title: str
    content: str  # without the restated "title: "


@dataclass(frozen=True)
class Segment:
    """Serial text, or a parallel block (titles as listed, and its branches)."""

    text: str = ""
    titles: tuple[str, ...] = ()
    branches: tuple[Branch, ...] = ()

    @property
    def parallel(self) -> bool:
        return bool(self.titles or self.branches)

    def plain(self) -> str:
        return "\n".join(b.content for b in self.branches) if self.parallel else self.text


_MARK = re.compile("|".join(re.escape(t) for t in TOKENS))


def parse(text: str) -> list[Segment]:
    """Segments of a marked-up answer. Tolerant of a truncated answer (an unclosed title, branch or
    block keeps what it has), since generation can stop anywhere."""
    out: list[Segment] = []
    pieces = _MARK.split(text)
    marks = _MARK.findall(text)
    serial = pieces[0]
    titles: list[str] = []
    branches: list[str] = []
    state = "serial"  # serial | title | titles (between titles) | block | branch
    for mark, piece in zip(marks, pieces[1:]):
        if mark == TITLE:
            if state == "serial" and serial:
                out.append(Segment(text=serial))
            serial = ""
            titles.append(piece)
            state = "title"
        elif mark == BRANCH:
            branches.append(piece)
            state = "branch"
        elif mark == END_PARA:
            out.append(_block(titles, branches))
            titles, branches = [], []
            serial, state = piece, "serial"
        elif mark == PARA and state == "serial" and serial:  # a block without titles
            out.append(Segment(text=serial))
            serial, state = "", "block"
        else:  # END_TITLE, PARA, END_BRANCH: text between them is not part of the answer
            state = {END_TITLE: "titles", PARA: "block", END_BRANCH: "block"}[mark]
    if state == "serial":
        if serial:
            out.append(Segment(text=serial))
    else:
        out.append(_block(titles, branches))
    return out


def _block(titles: list[str], raw: list[str]) -> Segment:
    branches = []
    for text in raw:
        # "T: C" as trained; "T:C" too (the engine forces "T:", the model writes what follows)
        title = max((t for t in titles if text.startswith(t + ":")), key=len, default=None)
        if title is None and any((t + ":").startswith(text) for t in titles):
            title, content = text, ""  # cut inside its forced "T:": no content written yet
        elif title is None:
            title, sep, content = text.partition(TITLE_SEP)
            if not sep:
                title, content = "", text
        else:
            content = text[len(title) + 1 :]
            content = content[1:] if content.startswith(" ") else content
        branches.append(Branch(title, content))
    return Segment(titles=tuple(titles), branches=tuple(branches))


def to_plain(text: str) -> str:
    """The answer as the user reads it: markup and titles list removed, branch contents (without
    "T: ") joined by "\n"."""
    return "".join(s.plain() for s in parse(text))
