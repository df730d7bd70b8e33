"""Real answers as ASPD data: the "sharegpt" source of `paraspec aspd build-data`.

Every assistant turn of a ShareGPT conversation is an answer; the user turn before it is the
prompt and the turns before that its history (Example.history, in the chat template, as a user
sends them). The answers go through the extraction stages (pipeline.py, keep_serial): an answer
with no accepted block stays a serial example, which is what teaches a model when not to branch.

Split by chat with datasets.split_of, the seeded hash the bench uses: ASPD trains on the "train"
chats and holds out "eval" chats, the ones no part of paraspec trains or warms on (the bench's
sharegpt set draws from them too); "warm" chats are in neither. A conversation that holds an
MT-Bench question (normalised text, or one that contains it) is dropped whole: MT-Bench is an
evaluation set.

Length: an example must fit the training length (`max_len` tokens of the bundled tokenizer,
`aspd train --max-len`). The question and the answer as ASPD writes it (markup and restated
titles included) must fit, else the turn is skipped, never cut: a cut answer would teach the
model to stop mid-answer. Earlier turns are then added newest first, whole, while they fit; the
first that does not fit ends the history.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .data import Example

SKIPS = ("no_question", "empty", "non_ascii", "mtbench", "in_train", "too_long", "markup_too_long")
KEY_WORDS = 8  # an MT-Bench question is looked for by its first words, then compared whole
MIN_ASCII = 0.9  # share of ASCII letters below which a turn counts as another language
PREFIX_CHARS = (
    6  # characters a token, more than text averages: a prefix this long settles most turns
)


@dataclass(frozen=True)
class Turn:
    id: str  # "sharegpt/<conversation id>#<message index>"
    chat_id: str
    history: tuple[dict, ...]  # the messages before the question
    question: str
    answer: str

    @property
    def context(self) -> str:
        """The whole conversation up to the answer, as text: what the judge reads as the question."""
        return "\n\n".join([*(m["content"] for m in self.history), self.question])


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[\W_]+", " ", text).casefold().split())


class MTBench:
    """MT-Bench's turns, normalised; `holds(text)` when text is one of them or contains one."""

    def __init__(self, questions: Sequence[str]):
        self.texts = {normalise(q) for q in questions}
        self.keys: dict[str, list[str]] = {}
        for t in self.texts:
            self.keys.setdefault(" ".join(t.split()[:KEY_WORDS]), []).append(t)

    @classmethod
    def load(cls, path: Path | None = None) -> "MTBench":
        from ..datasets import mtbench_questions

        return cls([t for q in mtbench_questions(path) for t in q.turns])

    def holds(self, text: str) -> bool:
        norm = normalise(text)
        if norm in self.texts:
            return True
        words = norm.split()
        for i in range(len(words)):
            for t in self.keys.get(" ".join(words[i : i + KEY_WORDS]), ()):
                if t in norm:
                    return True
        return False


def conversations(path: Path | None = None) -> list:
    """All of the file's conversations (datasets.sharegpt_conversations); a missing or unreadable
    file is one DataFileError naming it and the fetch command."""
    from .. import catalog
    from ..datasets import DataFileError, sharegpt_conversations

    path = Path(path) if path else catalog.ARTIFACTS["sharegpt"].path
    if not path.is_file():
        raise DataFileError(
            f"ShareGPT file {path} does not exist; fetch it with `paraspec fetch sharegpt`"
        )
    try:
        return list(sharegpt_conversations(path))
    except (UnicodeDecodeError, OSError) as e:
        raise DataFileError(
            f"ShareGPT file {path} cannot be read ({type(e).__name__}); "
            "fetch it again with `paraspec fetch sharegpt`"
        ) from None


LETTER = re.compile(r"[^\W\d_]")


def _ascii_share(text: str) -> float:
    if text.isascii():
        return 1.0
    letters = LETTER.findall(text)
    return sum(c.isascii() for c in letters) / len(letters) if letters else 1.0


def _rank(chat_id: str, seed: int) -> bytes:
    return hashlib.sha256(f"aspd:{seed}:{chat_id}".encode()).digest()


def user_texts(convs: Sequence, split: str) -> set[str]:
    """Every user turn of the split's chats, normalised."""
    from ..datasets import split_of

    return {
        normalise(m["content"])
        for c in convs
        if split_of(c.chat_id) == split
        for m in c.messages
        if m["role"] == "user"
    }


def turns(
    convs: Sequence,
    split: str,
    seed: int,
    mtbench: MTBench,
    skipped: Counter,
    exclude: set[str] | frozenset = frozenset(),
) -> Iterator[Turn]:
    """The assistant turns of the split's chats, chats in a seeded order (so that a cap takes a random
    set of whole chats), each chat's pieces and turns in file order. Skips are counted by reason;
    a question in `exclude` (normalised) is skipped as "in_train": ShareGPT holds the same chat
    under other ids, and a held-out question must not be one training has seen."""
    from ..datasets import split_of

    chosen = [(i, c) for i, c in enumerate(convs) if split_of(c.chat_id) == split]
    chosen.sort(key=lambda ic: (_rank(ic[1].chat_id, seed), ic[0]))
    for _, conv in chosen:
        msgs = conv.messages
        n_answers = sum(m["role"] == "assistant" for m in msgs)
        if any(m["role"] == "user" and mtbench.holds(m["content"]) for m in msgs):
            skipped["mtbench"] += n_answers
            continue
        for k, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            if k == 0 or msgs[k - 1]["role"] != "user":
                skipped["no_question"] += 1
                continue
            question, answer = msgs[k - 1]["content"].strip(), m["content"].strip()
            if not question or not answer:
                skipped["empty"] += 1
            elif min(_ascii_share(question), _ascii_share(answer)) < MIN_ASCII:
                skipped["non_ascii"] += 1
            elif exclude and normalise(question) in exclude:
                skipped["in_train"] += 1
            else:
                yield Turn(f"sharegpt/{conv.id}#{k}", conv.chat_id, msgs[: k - 1], question, answer)


@dataclass
class Budget:
    """The training length in tokens: `count` a text's tokens, `chat` a chat-template prompt's."""

    max_len: int
    count: Callable[[str], int]
    chat: Callable[[list[dict]], int]

    def _over(self, text: str, limit: int | None = None) -> bool:
        """Surely longer than `limit` tokens (default max_len), from a prefix: most turns are far longer,
        and a whole one takes long to tokenize. A prefix's count exceeds the whole text's part by a
        token or two at most."""
        limit = self.max_len if limit is None else limit
        cut = PREFIX_CHARS * max(limit, 1)
        return len(text) > cut and self.count(text[:cut]) > limit + 2

    def fits_plain(self, t: Turn) -> bool:
        if self._over(t.question) or self._over(t.answer):
            return False
        return (
            self.chat([{"role": "user", "content": t.question}]) + self.count(t.answer) + 1
            <= self.max_len
        )

    def answer_cost(self, ex: Example) -> int:
        """Tokens of the answer as ASPD writes it, and its EOS: the labelled text (each branch restates
        "T: "), each title again in the titles list, and the six markup tokens, with one token more per
        branch for BPE merges the segments lose (at least train.encode's count)."""
        return (
            self.count(ex.labelled)
            + 1
            + sum(2 + sum(self.count(b.title) + 4 for b in blk.branches) for blk in ex.blocks)
        )

    def history(self, t: Turn, answer_cost: int) -> list[dict] | None:
        """The most recent whole turns that fit beside the question and the answer; None if even the
        question does not fit."""
        room = self.max_len - answer_cost
        last = [{"role": "user", "content": t.question}]
        if self.chat(last) > room:
            return None
        hist = t.history
        cap = 0  # a turn far over the room ends the history before it is ever encoded whole
        while cap < len(hist) and not self._over(hist[-1 - cap]["content"], room):
            cap += 1

        def fits(n: int) -> bool:
            return self.chat([*hist[len(hist) - n :], *last]) <= room

        # the longest run of newest turns that fits, by galloping then bisecting: a long chat costs a
        # few encodings of about the room's length, not one per turn
        lo, hi, n = 0, cap + 1, 1
        while n < hi and fits(n):
            lo, n = n, n * 2
        hi = min(hi, n)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return [dict(m) for m in hist[len(hist) - lo :]]


def budget(max_len: int, tokenizer=None) -> Budget:
    """Counts in `tokenizer` (default: the bundled model's; characters / 4 and 8 tokens a message
    when there is none, as pipeline.Pipeline's default)."""
    if tokenizer is None:
        tokenizer = bundled_tokenizer()
    if tokenizer is None:
        return Budget(
            max_len, lambda s: len(s) // 4, lambda ms: sum(len(m["content"]) // 4 + 8 for m in ms)
        )
    return Budget(
        max_len,
        lambda s: len(tokenizer.encode(s, add_bos=False)),
        lambda ms: len(tokenizer.encode_chat(ms)),
    )


def bundled_tokenizer():
    import torch

    from ..errors import ModelLoadError
    from ..model.loader import load_model
    from ..model.tokenizer import Tokenizer

    try:
        loaded = load_model("default", torch.float32, keep_quantized=True)
        return Tokenizer.from_source(loaded.tokenizer_source)
    except ModelLoadError:
        return None


def examples(
    pipe, items: list[Turn], budget: Budget, source: str, skipped: Counter
) -> list[Example]:
    """The turns that fit, through the pipeline's stages (serial where no block is accepted), each
    with its prompt, history and the pipeline's judgement; blocks whose markup does not fit skipped."""
    fit = []
    for t in items:
        if budget.fits_plain(t):
            fit.append(t)
        else:
            skipped["too_long"] += 1
    by_id = {t.id: t for t in fit}
    out = []
    for ex in pipe.run([(t.id, t.context, t.answer) for t in fit], source, keep_serial=True):
        t = by_id[ex.id]
        history = budget.history(t, budget.answer_cost(ex))
        if history is None:
            skipped["markup_too_long"] += 1
            continue
        ex.prompt, ex.history = t.question, history
        out.append(ex)
    return out


def down_sample(
    examples: list[Example], share: float, others: tuple[int, int], seed: int
) -> tuple[list[Example], dict]:
    """Keep every example with a block and a seeded sample of the serial ones, so that the whole
    training set (these and `others` = (with a block, serial) from the other sources) has `share`
    of its examples with a block; all serial ones when there are too few. Order is kept."""
    serial = [i for i, e in enumerate(examples) if not e.blocks]
    blocks = len(examples) - len(serial) + others[0]
    want = math.floor(blocks * (1 - share) / share + 1e-9) - others[1] if share < 1 else 0
    keep = set(random.Random(seed).sample(serial, max(0, min(len(serial), want))))
    out = [e for i, e in enumerate(examples) if e.blocks or i in keep]
    return out, {"serial_available": len(serial), "serial_kept": len(keep)}


def mix(examples: Sequence[Example]) -> dict:
    n = len(examples)
    b = sum(bool(e.blocks) for e in examples)
    return {
        "examples": n,
        "block": b,
        "serial": n - b,
        "block_share": round(b / n, 4) if n else 0.0,
    }
