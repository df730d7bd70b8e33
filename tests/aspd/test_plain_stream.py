"""PlainDetokenizer: text pushed token by token, titles written serially before their block,
gives exactly to_plain of the whole answer (a title list must not leak as plain text first),
wherever the answer stops, decoding each token a bounded number of times."""

import random

import pytest
import torch

from paraspec.aspd.markup import (
    BRANCH,
    END_BRANCH,
    END_TITLE,
    PARA,
    TITLE,
    TOKENS,
    MarkupIds,
    add_markup_tokens,
    to_plain,
)
from paraspec.aspd.stream import PlainDetokenizer, marked_text
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer


class WordTokenizer:
    """Ids are indexes into a word list; markup ids come after it (the test's whole vocabulary)."""

    def __init__(self, words: list[str]):
        self.words = words

    def decode(self, ids, skip_special: bool = True) -> str:
        return "".join(self.words[i] for i in ids)


def test_streamed_plain_text_equals_plain_of_the_whole_answer():
    words = ["Sums", ": ", "A", "B", ":", " 76-20 = 56", " 3+4 = 7", "\n", "Done."]
    tok = WordTokenizer(words)
    n = len(words)
    markup = MarkupIds(
        title=n,
        end_title=n + 1,
        para=n + 2,
        branch=n + 3,
        end_branch=n + 4,
        end_para=n + 5,
        colon_space=[1],
    )
    tok.words = words + list(TOKENS)
    T, ET, P, B, EB, EP = markup.all
    serial = [0, 7, T, 2, ET, T, 3, ET, P]  # the title list comes token by token
    block = [B, 2, 4, 5, EB, B, 3, 4, 6, EB, EP]  # the engine emits a block at once
    after = [7, 8]
    det = PlainDetokenizer(tok, markup)
    text = (
        "".join(det.push([t]) for t in serial)
        + det.push(block)
        + "".join(det.push([t]) for t in after)
        + det.flush()
    )
    whole = to_plain(marked_text(tok, serial + block + after, markup))
    assert text == whole
    assert "76-20" in text and "A:" not in text


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    """A byte-level BPE tokenizer (multi-byte characters span tokens) with the six tokens added."""
    t = Tokenizer.from_source(load_model(tiny_model_dir("llama"), torch.float32).tokenizer_source)
    return t, add_markup_tokens(t, {})


def _answer(rng: random.Random, tok: Tokenizer, m: MarkupIds, blocks: int = 2) -> list[int]:
    """A marked-up answer as the engine writes it: serial text, titles, the block, serial text..."""
    words = tok.encode("héllo wörld 日本語 ✓ 🙂 76-20 = 56, a: b\n", add_bos=False)
    base = min(m.all)

    def text(n: int) -> list[int]:  # real words, and random ids (stray bytes of broken characters)
        return [rng.choice(words) if rng.random() < 0.7 else rng.randrange(base) for _ in range(n)]

    out = text(rng.randrange(0, 6))
    for _ in range(blocks):
        titles = [text(rng.randrange(1, 3)) for _ in range(rng.randrange(1, 4))]
        out += [t for ti in titles for t in (m.title, *ti, m.end_title)] + [m.para]
        out += [
            t
            for ti in titles
            for t in (m.branch, *ti, m.colon_space[0], *text(rng.randrange(0, 5)), m.end_branch)
        ] + [m.end_para]
        out += text(rng.randrange(0, 6))
    return out


def test_streamed_text_is_to_plain_of_the_raw_markup_wherever_the_answer_stops(tok):
    """Token by token or in chunks, cut anywhere (max_tokens: inside a title list, a branch's
    forced "T:", a branch): every delta extends the text, and the text is to_plain(raw)."""
    t, m = tok
    rng = random.Random(0)
    for trial in range(40):
        ids = _answer(rng, t, m)
        for n in range(len(ids) + 1):
            det = PlainDetokenizer(t, m)
            text, i = "", 0
            while i < n:
                step = 1 if trial % 2 == 0 else rng.randrange(1, 6)
                text += det.push(ids[i : min(n, i + step)])
                i += step
                final = to_plain(marked_text(t, ids[:n], m))
                assert final.startswith(text), (ids[:n], text)
            assert text + det.flush() == to_plain(marked_text(t, ids[:n], m))


def test_a_branch_cut_inside_its_title_is_empty():
    assert (
        to_plain(
            f"{TITLE}blue sky{END_TITLE}{TITLE}red{END_TITLE}{PARA}{BRANCH}blue sky: x{END_BRANCH}"
            f"{BRANCH}re"
        )
        == "x\n"
    )
    assert to_plain(f"{TITLE}red{END_TITLE}{PARA}{BRANCH}red:") == ""
    assert to_plain(f"{TITLE}red{END_TITLE}{PARA}{BRANCH}") == ""


def test_streaming_decodes_each_token_a_bounded_number_of_times(tok):
    """Incremental: a long answer is not decoded again from its start at every token."""
    t, m = tok

    class Counting:
        decoded = 0

        def decode(self, ids, skip_special=True):
            Counting.decoded += len(ids)
            return t.decode(ids, skip_special)

    ids = _answer(random.Random(1), t, m, blocks=1) * 40
    det = PlainDetokenizer(Counting(), m)
    text = "".join(det.push([i]) for i in ids) + det.flush()
    assert text == to_plain(marked_text(t, ids, m))
    assert Counting.decoded < 12 * len(ids)
