"""ASPD markup: the six tokens added to paraspec's tokenizer and embeddings; parse / to_plain."""

import pytest
import torch

from paraspec.aspd.markup import (
    BRANCH,
    END_BRANCH,
    END_PARA,
    END_TITLE,
    PARA,
    TITLE,
    TOKENS,
    Branch,
    MarkupIds,
    add_markup_tokens,
    parse,
    to_plain,
)
from paraspec.errors import ModelLoadError
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer

MARKED = (
    f"Intro:\n{TITLE}Red{END_TITLE}{TITLE}Blue{END_TITLE}{PARA}{BRANCH}Red: warm colour{END_BRANCH}"
    f"{BRANCH}Blue: cold: deep{END_BRANCH}{END_PARA}\nDone."
)


def test_parse_and_plain():
    segs = parse(MARKED)
    assert [s.parallel for s in segs] == [False, True, False]
    assert segs[1].titles == ("Red", "Blue")
    assert segs[1].branches == (Branch("Red", "warm colour"), Branch("Blue", "cold: deep"))
    assert to_plain(MARKED) == "Intro:\nwarm colour\ncold: deep\nDone."
    assert to_plain("no markup at all") == "no markup at all"


def test_parse_truncated_answer_keeps_what_it_has():
    cut = MARKED[: MARKED.index(END_BRANCH) - 3]  # stops inside branch 1
    assert to_plain(cut) == "Intro:\nwarm col"
    assert to_plain(f"a{TITLE}T") == "a"  # inside the titles list


@pytest.mark.parametrize("which", ["tiny", "bundled"])
def test_add_markup_tokens(which, tiny_model_dir):
    if which == "tiny":
        loaded = load_model(tiny_model_dir("llama"), torch.float32)
    else:
        loaded = load_model("default", torch.float32, keep_quantized=True)  # Q8_0 embedding blocks
    tok = Tokenizer.from_source(loaded.tokenizer_source)
    with pytest.raises(ModelLoadError, match="lacks the ASPD tokens"):
        MarkupIds.from_tokenizer(tok)
    old_rows = loaded.weights["tok_embeddings"].shape[0]
    ids = add_markup_tokens(tok, loaded.weights, loaded)
    emb = loaded.weights["tok_embeddings"]
    assert (
        isinstance(emb, torch.Tensor) and emb.shape[0] == max(ids.all) + 1 == loaded.args.vocab_size
    )
    assert torch.allclose(emb[ids.para], emb[:old_rows].float().mean(0))
    # each token is one id, never split, and decodes back (skipped as special by default)
    text = f"x{TITLE}T{END_TITLE}{PARA}{BRANCH}T: y{END_BRANCH}{END_PARA}z"
    enc = tok.encode(text)
    assert all(enc.count(i) == 1 for i in ids.all)
    assert tok.decode(enc, skip_special=False) == text
    assert tok.decode(enc) == "xTT: yz"
    assert tok.decode(ids.colon_space) == ": "
    assert add_markup_tokens(tok, loaded.weights, loaded) == ids  # idempotent
    assert loaded.weights["tok_embeddings"].shape[0] == emb.shape[0]
    assert [tok.backend.id_to_token(i) for i in ids.all] == list(TOKENS)


def test_untied_lm_head_grows_too(tiny_model_dir):
    loaded = load_model(tiny_model_dir("qwen2"), torch.float32)
    assert "lm_head" in loaded.weights
    tok = Tokenizer.from_source(loaded.tokenizer_source)
    ids = add_markup_tokens(tok, loaded.weights)
    assert loaded.weights["lm_head"].shape[0] == max(ids.all) + 1
