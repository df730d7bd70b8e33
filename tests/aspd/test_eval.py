"""`paraspec aspd eval --quick` end to end on tiny random models: the engine's aspd plugin (with and without
memory_decoding drafts) against the control decoded autoregressively, one JSON line with the keys."""
import json

import pytest
import torch

from paraspec.aspd import synth
from paraspec.aspd.data import write_jsonl
from paraspec.aspd.evaluate import run_eval
from paraspec.aspd.hf_folder import write_hf_folder
from paraspec.aspd.markup import add_markup_tokens
from paraspec.cli import main
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer

KEYS = {"speedup", "accuracy_aspd", "accuracy_control", "speedup_with_drafts"}


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    control = tiny_model_dir()
    m = load_model(control, torch.float32)
    add_markup_tokens(Tokenizer.from_source(m.tokenizer_source), m.weights, m)
    aspd = write_hf_folder(tmp_path_factory.mktemp("aspd") / "m", m.args, m.weights, m.tokenizer_source, True)
    return str(aspd), str(control)


def test_run_eval_scores_every_mode(models):
    examples = synth.generate(2, 1000)
    report = run_eval(*models, examples, max_tokens=12)
    assert KEYS <= set(report) and report["n"] == 2
    for mode in ("control", "aspd", "aspd+drafts"):
        m = report["modes"][mode]
        assert 0 <= m["accuracy"] <= 1 and m["total_wall_s"] > 0
        assert all(r["forward_passes"] >= 1 for r in report["answers"][mode])
    assert all(r["raw"] is not None for r in report["answers"]["aspd"])   # the engine's raw markup text
    assert report["accuracy_control"] == 0.0                              # a random model solves nothing


def test_quick_eval_cli_prints_one_json_line(models, tmp_path, capsys):
    data = tmp_path / "heldout.jsonl"
    write_jsonl(data, synth.generate(2, 1000))
    aspd, control = models
    assert main(["aspd", "eval", "--quick", "--n", "1", "--max-tokens", "8", "--data", str(data),
                 "--aspd-model", aspd, "--control-model", control, "--out", str(tmp_path / "r.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and KEYS <= set(json.loads(lines[0]))
    assert json.loads((tmp_path / "r.json").read_text())["answers"]["control"][0]["id"] == "s1000-00000"


def test_eval_without_the_markup_tokens_fails_clearly(models, capsys):
    _, control = models
    assert main(["aspd", "eval", "--quick", "--n", "1", "--aspd-model", control, "--control-model", control]) == 2
    assert "lacks the ASPD tokens" in capsys.readouterr().err
