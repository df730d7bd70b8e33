"""paraspec's GGUF tokenizers on llama.cpp's own tokenizer test set: every vocabulary-only
`ggml-vocab-*.gguf` in a llama.cpp `models/` folder that has its `.inp` / `.out` cases (texts and
the ids llama.cpp expects), tokenized by paraspec as it would tokenize that model's file.

    python benchmarks/llama_cpp_vocab_cases.py DIR     # DIR: llama.cpp's models/ (a checkout, or
                                                       # vendor/llama.cpp/models in llama-cpp-python's sdist)

A vocabulary paraspec refuses (a tokenizer model or pre-tokenizer it does not know) is listed with
its one-line error. Exit status 1 when a vocabulary it loads gives other ids on any case. The
vocabularies belong to their models' owners: they are read where they lie, never copied here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paraspec.errors import ModelLoadError
from paraspec.model.gguf_file import read_gguf
from paraspec.model.gguf_loader import gguf_tokenizer_source
from paraspec.model.tokenizer import Tokenizer

SEPARATOR = "\n__ggml_vocab_test__\n"


def check(vocab: Path) -> tuple[str, int, int, str]:
    """(status, cases, mismatches, detail) for one vocabulary."""
    texts = vocab.with_name(vocab.name + ".inp").read_text(encoding="utf-8").split(SEPARATOR)[:-1]
    expected = vocab.with_name(vocab.name + ".out").read_text().split("\n")[: len(texts)]
    fields = read_gguf(vocab).fields
    try:
        tok = Tokenizer.from_source(gguf_tokenizer_source(fields))
    except ModelLoadError as e:
        return "refused", len(texts), 0, str(e)
    bad = [
        t
        for t, ids in zip(texts, expected)
        if tok.encode(t, add_bos=False) != [int(i) for i in ids.split()]
    ]
    detail = f"first mismatch: {bad[0][:60]!r}" if bad else ""
    return ("ok" if not bad else "MISMATCH"), len(texts), len(bad), detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", type=Path, help="llama.cpp's models/ folder")
    a = ap.parse_args()
    vocabs = sorted(
        p for p in a.models.glob("ggml-vocab-*.gguf") if p.with_name(p.name + ".inp").is_file()
    )
    if not vocabs:
        sys.exit(f"no ggml-vocab-*.gguf with .inp/.out cases in {a.models}")
    failed = False
    print("| vocabulary | tokenizer.ggml.model / pre | cases | result |\n|---|---|---|---|")
    for v in vocabs:
        f = read_gguf(v).fields
        status, n, bad, detail = check(v)
        failed |= status == "MISMATCH"
        result = {
            "ok": "all equal",
            "MISMATCH": f"**{bad} differ** ({detail})",
            "refused": f"refused: {detail}",
        }[status]
        print(
            f"| {v.name[len('ggml-vocab-') : -len('.gguf')]} | {f.get('tokenizer.ggml.model')} / "
            f"{f.get('tokenizer.ggml.pre', '-')} | {n} | {result} |"
        )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
