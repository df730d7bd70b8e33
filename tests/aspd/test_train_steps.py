"""ASPD training is fixed by steps and seed, never by the clock: the same recipe gives the same
adapter, both variants take the planned steps, and the adapter's metadata names its recipe and
the commit that made it."""

import json

import torch

from paraspec.aspd import synth, train
from paraspec.aspd.data import write_jsonl
from paraspec.aspd.lora import load_adapter
from paraspec.aspd.markup import add_markup_tokens
from paraspec.cli import main
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer


def _fit(tiny_model_dir, seed: int, steps: int) -> tuple[dict, dict]:
    m = load_model(tiny_model_dir(), torch.float32)
    tok = Tokenizer.from_source(m.tokenizer_source)
    n_base = m.weights["tok_embeddings"].shape[0]
    ids = add_markup_tokens(tok, m.weights, m)
    torch.manual_seed(seed)
    model = train.TrainModel(m.args, m.weights, n_base, rank=4, alpha=8.0)
    data = [train.encode(ex, tok, ids) for ex in synth.generate(3, 9)]
    stats = train.fit(
        model, data, train.TrainConfig(steps=steps, batch=2, lr=1e-2, seed=seed), log=lambda m: None
    )
    return {k: v.detach().clone() for k, v in model.adapter_tensors().items()}, stats


def test_same_steps_and_seed_give_the_same_adapter(tiny_model_dir):
    a, sa = _fit(tiny_model_dir, 0, 5)
    b, sb = _fit(tiny_model_dir, 0, 5)
    c, _ = _fit(tiny_model_dir, 1, 5)
    assert sa["steps"] == sa["planned_steps"] == 5  # 5 steps of 2 over 3 examples: the order wraps
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_train_cli_records_steps_seed_data_and_commit(tiny_model_dir, tmp_path):
    write_jsonl(tmp_path / "train.jsonl", synth.generate(4, 2))
    for variant in ("aspd", "control"):
        assert (
            main(
                [
                    "aspd",
                    "train",
                    "--variant",
                    variant,
                    "--model",
                    str(tiny_model_dir()),
                    "--data",
                    str(tmp_path),
                    "--out",
                    str(tmp_path / "ad"),
                    "--steps",
                    "3",
                    "--batch",
                    "2",
                    "--seed",
                    "3",
                ]
            )
            == 0
        )
    metas = [load_adapter(tmp_path / "ad" / f"{v}.safetensors")[1] for v in ("aspd", "control")]
    for meta in metas:
        # not 4 examples / 2
        assert meta["steps"] == 3 and meta["seed"] == 3 and meta["train"]["steps"] == 3
        assert meta["commit"] and len(meta["data_sha256"]) == 16
    assert metas[0]["data_sha256"] == metas[1]["data_sha256"]


def test_train_on_the_users_own_pairs(tiny_model_dir, tmp_path, capsys):
    """--data FILE.jsonl: the user's (prompt, answer) pairs go through build-data's stages; a list
    answer becomes a block, a plain one stays serial, and both train."""
    # over the stages' 128 tokens, under the tiny model's 1024 bytes
    from test_data_extract import (
        LIST_ANSWER,
        PAD,
    )

    pairs = [
        {"prompt": "What containers does Python have?", "answer": LIST_ANSWER + PAD * 2},
        {"prompt": "What is Python?", "answer": "Python is a programming language." + PAD * 3},
    ]
    f = tmp_path / "mine.jsonl"
    f.write_text("\n".join(json.dumps(p) for p in pairs) + "\n")
    assert (
        main(
            [
                "aspd",
                "train",
                "--variant",
                "aspd",
                "--model",
                str(tiny_model_dir()),
                "--data",
                str(f),
                "--out",
                str(tmp_path / "ad"),
                "--steps",
                "1",
                "--batch",
                "2",
                "--max-len",
                "1000",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "1 with blocks, 1 serial" in out and "[aspd] 2 examples" in out, out
    assert load_adapter(tmp_path / "ad" / "aspd.safetensors")[1]["train"]["steps"] == 1
    f.write_text(json.dumps({"prompt": "no answer"}) + "\n")
    assert (
        main(
            [
                "aspd",
                "train",
                "--model",
                str(tiny_model_dir()),
                "--data",
                str(f),
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--data" in err[0] and "line 1" in err[0] and "'answer'" in err[0], err


def test_both_variants_drop_the_same_too_long_examples(tiny_model_dir, tmp_path):
    """An example whose ASPD encoding is over --max-len but whose plain one fits is dropped for the
    control too: the two variants see the same examples, so the same batches."""
    m = load_model(tiny_model_dir(), torch.float32)
    tok = Tokenizer.from_source(m.tokenizer_source)
    ids = add_markup_tokens(tok, m.weights, m)
    examples = synth.generate(4, 2)
    aspd_len = [len(train.encode(e, tok, ids).ids) for e in examples]
    plain_len = [len(train.encode(e, tok, None).ids) for e in examples]
    longest = max(range(4), key=aspd_len.__getitem__)
    max_len = aspd_len[longest] - 1
    assert plain_len[longest] <= max_len and sorted(aspd_len)[-2] <= max_len  # the case under test
    write_jsonl(tmp_path / "train.jsonl", examples)
    for variant in ("aspd", "control"):
        assert (
            main(
                [
                    "aspd",
                    "train",
                    "--variant",
                    variant,
                    "--model",
                    str(tiny_model_dir()),
                    "--data",
                    str(tmp_path),
                    "--out",
                    str(tmp_path / "ad"),
                    "--steps",
                    "1",
                    "--batch",
                    "2",
                    "--max-len",
                    str(max_len),
                ]
            )
            == 0
        )
    metas = [load_adapter(tmp_path / "ad" / f"{v}.safetensors")[1] for v in ("aspd", "control")]
    assert metas[0]["train"]["examples"] == metas[1]["train"]["examples"] == 3
