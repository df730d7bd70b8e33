"""PlainDetokenizer: text pushed token by token, titles written serially before their block,
gives exactly to_plain of the whole answer (a title list must not leak as plain text first)."""
from paraspec.aspd.markup import TOKENS, MarkupIds, to_plain
from paraspec.aspd.stream import PlainDetokenizer, marked_text


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
    markup = MarkupIds(title=n, end_title=n + 1, para=n + 2, branch=n + 3, end_branch=n + 4, end_para=n + 5,
                       colon_space=[1])
    tok.words = words + list(TOKENS)
    T, ET, P, B, EB, EP = markup.all
    serial = [0, 7, T, 2, ET, T, 3, ET, P]          # the title list comes token by token
    block = [B, 2, 4, 5, EB, B, 3, 4, 6, EB, EP]     # the engine emits a block at once
    after = [7, 8]
    det = PlainDetokenizer(tok, markup)
    text = "".join(det.push([t]) for t in serial) + det.push(block) + "".join(det.push([t]) for t in after) + det.flush()
    whole = to_plain(marked_text(tok, serial + block + after, markup))
    assert text == whole
    assert "76-20" in text and "A:" not in text
