"""GGUF files with a SentencePiece vocabulary (`tokenizer.ggml.model` 'llama': Llama-2, Mistral,
TinyLlama, CodeLlama) encode and decode text exactly as SentencePiece itself does.

No such vocabulary ships in a registry package, so the module trains one with sentencepiece (BPE,
Llama-2's training options: byte fallback, digits split, a dummy space prefix, no whitespace
normalisation, whitespace-only pieces) on varied text, writes it into a GGUF the way llama.cpp's
convert_hf_to_gguf.py writes a tokenizer.model (pieces, scores, token types: UNKNOWN, CONTROL,
BYTE, USER_DEFINED), and compares paraspec's ids with SentencePiece's on the same texts. Where
SentencePiece has no rule (special tokens inside text) the reference is llama.cpp's: it matches
them, and the text after each one gets a space prefix of its own; where llama-cpp-python is
installed (`make peers`) its tokenizer is compared directly.
"""

import importlib.util
import io
import os
import random
from pathlib import Path

import pytest
import torch

from paraspec.errors import ModelLoadError
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import IncrementalDetokenizer, Tokenizer
from test_pretokenizers import POOL, TEXTS
from tiny_models import write_one_layer_gguf

SRC = Path(__file__).parents[2] / "src" / "paraspec"
DATA = Path(__file__).parent / "data"
USER_DEFINED = "<tool_call>"
EXTRA_POOL = [
    "    ",
    "        ",
    "\n    ",
    "def ",
    "self.",
    "return ",
    "▁",
    "<0x41>",
    "<s>x",
    USER_DEFINED,
]


def _require(module: str, why: str):
    if importlib.util.find_spec(module) is None:
        msg = f"{module} ({why}) is not installed; run `make install`"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def _corpus() -> list[str]:
    lines = [line for f in sorted(SRC.rglob("*.py")) for line in f.read_text().splitlines()]
    for f in sorted(DATA.glob("*.inp")):
        lines += f.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    return lines + TEXTS * 20


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    """(the sentencepiece processor, the GGUF path, paraspec's tokenizer from the GGUF)."""
    _require("sentencepiece", "the reference tokenizer, in the [test] extra")
    import sentencepiece

    tmp = tmp_path_factory.mktemp("spm")
    (tmp / "corpus.txt").write_text("\n".join(_corpus()), encoding="utf-8")
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        input=str(tmp / "corpus.txt"),
        model_writer=proto,
        model_type="bpe",
        vocab_size=2000,
        byte_fallback=True,
        split_digits=True,
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        allow_whitespace_only_pieces=True,
        character_coverage=0.999,
        user_defined_symbols=[USER_DEFINED],
        num_threads=1,
        minloglevel=2,
    )
    sp = sentencepiece.SentencePieceProcessor(model_proto=proto.getvalue())

    # convert_hf_to_gguf.py's _create_vocab_sentencepiece, then [PADn] rows up to the embedding's
    n = sp.get_piece_size()
    tokens = [sp.id_to_piece(i) for i in range(n)] + [f"[PAD{i}]" for i in range(3)]
    scores = [sp.get_score(i) for i in range(n)] + [-1000.0] * 3
    types = [
        2
        if sp.is_unknown(i)
        else 3
        if sp.is_control(i)
        else 6
        if sp.is_byte(i)
        else 4
        if sp.id_to_piece(i) == USER_DEFINED
        else 5
        if sp.is_unused(i)
        else 1
        for i in range(n)
    ] + [5] * 3
    path = tmp / "spm.gguf"

    def fields(w):
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_string("tokenizer.ggml.pre", "default")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", scores)
        w.add_array("tokenizer.ggml.token_type", types)
        w.add_uint32("tokenizer.ggml.bos_token_id", sp.bos_id())
        w.add_uint32("tokenizer.ggml.eos_token_id", sp.eos_id())
        w.add_uint32("tokenizer.ggml.unknown_token_id", sp.unk_id())
        w.add_string(
            "tokenizer.chat_template",
            "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
            "[INST] {{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}",
        )

    write_one_layer_gguf(path, len(tokens), fields)
    source = load_model(path, torch.float32).tokenizer_source
    return sp, path, source


def _texts(n: int, seed: int) -> list[str]:
    rng, pool = random.Random(seed), POOL + EXTRA_POOL
    fuzz = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(n)]
    code = [line for line in (SRC / "model" / "tokenizer.py").read_text().splitlines() if line][
        :200
    ]
    runs = [" " * k for k in range(1, 40)] + [f"x{' ' * k}y\n{' ' * k}z" for k in range(1, 40)]
    return [t for t in TEXTS + fuzz + code + runs if USER_DEFINED not in t and "<s>" not in t]


def test_ids_equal_sentencepiece(spm):
    sp, _, source = spm
    tok = Tokenizer.from_source(source)
    for text in _texts(3000, seed=1):
        assert tok.encode(text, add_bos=False) == sp.encode(text), text


def test_decode_equals_sentencepiece_and_streams(spm):
    sp, _, source = spm
    tok = Tokenizer.from_source(source)
    for text in _texts(300, seed=2):
        ids = tok.encode(text, add_bos=False)
        want = text.replace("\u2581", " ")  # SentencePiece's own space sign reads back as a space
        assert tok.decode(ids) == sp.decode(ids) == want, text
        stream = IncrementalDetokenizer(tok)
        assert "".join(stream.push([i]) for i in ids) + stream.flush() == want, text


def test_bytes_fall_back_and_user_defined_pieces_stay_whole(spm):
    sp, _, source = spm
    tok = Tokenizer.from_source(source)
    ids = tok.encode(f"🐍 call {USER_DEFINED}x", add_bos=False)
    # SentencePiece writes no space before "x"; llama.cpp (and transformers' legacy Llama
    # tokenizer) tokenize the text after any added token on its own, with its space prefix
    assert ids == sp.encode("🐍 call ") + [sp.piece_to_id(USER_DEFINED)] + sp.encode("x")
    assert [sp.id_to_piece(i) for i in ids[:5]][1:] == ["<0xF0>", "<0x9F>", "<0x90>", "<0x8D>"]


def test_bos_by_default_special_tokens_matched_with_llama_cpp_spacing(spm):
    sp, _, source = spm
    tok = Tokenizer.from_source(source)
    assert tok.add_bos and tok.encode("hi") == [sp.bos_id()] + sp.encode("hi")
    assert tok.eos_token_ids == {sp.eos_id()}
    # llama.cpp: the text after a special token is tokenized on its own, with its own space prefix
    ids = tok.encode("one</s>two <unk>", add_bos=False)
    assert ids == sp.encode("one") + [sp.eos_id()] + sp.encode("two ") + [sp.unk_id()]
    assert (
        tok.decode(ids) == "one two " and tok.decode(ids, skip_special=False) == "one</s> two <unk>"
    )
    off = Tokenizer.from_source({**source, "add_bos_token": False})
    assert off.encode("hi") == sp.encode("hi")


def test_chat_template_writes_its_own_bos(spm):
    sp, _, source = spm
    tok = Tokenizer.from_source(source)
    ids = tok.encode_chat([{"role": "user", "content": "hi there"}])
    assert ids == [sp.bos_id()] + sp.encode("[INST] hi there [/INST]")


def test_no_space_prefix_when_the_file_says_so(spm):
    sp, _, source = spm
    tok = Tokenizer.from_source({**source, "add_space_prefix": False})
    ids = tok.encode("hello world", add_bos=False)
    assert [sp.id_to_piece(i) for i in ids][0][0] != "\u2581"
    assert tok.decode(ids) == "hello world"


def test_ids_equal_llama_cpp(spm):
    """llama.cpp's own SentencePiece tokenizer on the same file (an optional peer: `make peers`)."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python (an optional peer, `make peers`) is not installed")
    import llama_cpp

    sp, path, source = spm
    tok = Tokenizer.from_source(source)
    ref = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    for text in _texts(500, seed=3) + ["one</s>two", "<s>[INST] hi [/INST]"]:
        assert tok.encode(text) == ref.tokenize(text.encode(), add_bos=True, special=True), text


def test_bad_spm_vocabularies_are_one_line_errors(spm):
    _, _, source = spm
    with pytest.raises(ModelLoadError, match=r"tokenizer.ggml.scores has 0 entries"):
        Tokenizer.from_source({**source, "scores": []})
    with pytest.raises(
        ModelLoadError, match=r"tokenizer.ggml.model 'bert' is not supported.*'llama'"
    ):
        Tokenizer.from_source({**source, "model": "bert"})


def test_the_llama_cpp_vocab_cases_script_reads_a_models_folder(spm, tmp_path):
    """benchmarks/llama_cpp_vocab_cases.py on a folder laid out as llama.cpp's models/ (the trained
    vocabulary, its cases written with SentencePiece's ids; one case changed: a mismatch)."""
    import importlib.util as iu
    import shutil

    sp, path, _ = spm
    spec = iu.spec_from_file_location(
        "vocab_cases", Path(__file__).parents[2] / "benchmarks" / "llama_cpp_vocab_cases.py"
    )
    script = iu.module_from_spec(spec)
    spec.loader.exec_module(script)
    vocab = tmp_path / "ggml-vocab-trained.gguf"
    shutil.copy(path, vocab)
    texts = ["hello world", "    def f(x):\n        return x", "Héllo 日本語"]
    (tmp_path / (vocab.name + ".inp")).write_text(
        "".join(t + script.SEPARATOR for t in texts), encoding="utf-8"
    )
    ids = [" ".join(map(str, sp.encode(t))) for t in texts]
    (tmp_path / (vocab.name + ".out")).write_text("\n".join(ids) + "\n")
    assert script.check(vocab)[:3] == ("ok", 3, 0)
    (tmp_path / (vocab.name + ".out")).write_text("\n".join(ids[:2] + ["1 2 3"]) + "\n")
    assert script.check(vocab)[:3] == ("MISMATCH", 3, 1)
