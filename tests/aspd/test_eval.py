"""`paraspec aspd eval --quick` end to end on tiny random models: the engine's aspd plugin (with and without
memory_decoding drafts) against the control decoded autoregressively, one JSON line with the keys."""

import json

import pytest
import torch

from paraspec.aspd import synth
from paraspec.aspd.data import write_jsonl
from aspd_engines import Script
from paraspec import LLM, SamplingParams
from paraspec.aspd.paths import ADAPTER_DIR, EXPORT_DIR
from paraspec.aspd import eval_prompts
from paraspec.aspd.eval_summary import brief_report
from paraspec.aspd.evaluate import ASPD, heldout, model_folder, run_eval
from paraspec.aspd.hf_folder import write_hf_folder
from paraspec.aspd.markup import MarkupIds, add_markup_tokens, to_plain
from paraspec.cli import main
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer

KEYS = {"speedup", "accuracy_aspd", "accuracy_control", "speedup_with_drafts", "text_mismatches"}


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    control = tiny_model_dir()
    m = load_model(control, torch.float32)
    add_markup_tokens(Tokenizer.from_source(m.tokenizer_source), m.weights, m)
    aspd = write_hf_folder(
        tmp_path_factory.mktemp("aspd") / "m", m.args, m.weights, m.tokenizer_source, True
    )
    return str(aspd), str(control)


def test_run_eval_scores_every_mode(models):
    examples = synth.generate(2, 1000, split="heldout")
    real = eval_prompts.real_prompts()[18:21]  # two chat prompts and an instruction
    report = run_eval(*models, examples, max_tokens=12, real={"real": real}, base_model=models[1])
    assert (
        KEYS | {"speedup_cpu", "speedup_with_drafts_cpu", "latency_ratio"} <= set(report)
        and report["n"] == 2
    )
    for mode in ("control", "control+drafts", "aspd", "aspd+drafts"):
        m = report["modes"][mode]
        assert 0 <= m["accuracy"]["mean"] <= 1 and m["total_wall_s"] > 0 and m["total_cpu_s"] > 0
        assert all(r["forward_passes"] >= 1 for r in report["answers"][mode])
    # the engine's raw markup text
    assert all(r["raw"] is not None for r in report["answers"]["aspd"])
    assert report["accuracy_control"] == 0.0  # a random model solves nothing
    assert report["text_mismatches"] == 0
    lo, hi = report["intervals"]["speedup"]["ci90"]
    assert lo <= report["speedup"] <= hi
    r = report["real"]
    assert r["n"] == 3 and set(r["modes"]) == {
        "base",
        "control",
        "control+drafts",
        "aspd",
        "aspd+drafts",
    }
    # the reference against itself
    assert all(row["overlap"] == 1.0 for row in r["answers"]["base"])
    # the control model is the base model here, so the control's answers ARE the reference
    assert r["quality"]["overlap_control"] == 1.0
    # checks or none
    assert r["answers"]["aspd"][2]["ok"] is not None and r["answers"]["aspd"][0]["ok"] is None
    brief = brief_report(report)
    assert json.dumps(brief) and brief["real"]["n"] == 3 and "answers" not in brief


def test_sharegpt_set_is_scored_against_its_own_answers(models, tmp_path):
    """Held-out ShareGPT turns: decoded with their history, scored against their own answer (so no
    base model is decoded), split by whether that answer has a list."""
    from paraspec.aspd.data import Example

    hist = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]
    rows = [
        Example(
            "sharegpt/a_0#1",
            "serial",
            "Name three colours",
            ["- red\n- blue\n- green"],
            source="sharegpt-heldout",
            history=hist,
        ),
        Example(
            "sharegpt/b_0#0",
            "serial",
            "Tell me a story",
            ["Once upon a time a cat sat."],
            source="sharegpt-heldout",
        ),
    ]
    write_jsonl(tmp_path / "heldout_sharegpt.jsonl", rows)
    exs = eval_prompts.sharegpt_heldout(tmp_path / "heldout_sharegpt.jsonl", 5)
    assert [e.messages[:-1] for e in exs] == [hist, []]
    report = run_eval(*models, [], max_tokens=8, real={"sharegpt": exs})
    r = report["sharegpt"]
    assert set(r["modes"]) == {"control", "control+drafts", "aspd", "aspd+drafts"}
    assert [a["reference_list"] for a in r["answers"]["aspd"]] == [True, False] and r[
        "reference_no_list"
    ] == 1
    # a random model writes neither
    assert all(0 <= a["overlap"] < 1 for a in r["answers"]["control"])
    assert r["blocks_where_no_list"] == 0 and "checks_base" not in r["quality"]
    brief = brief_report(report)
    assert brief["sharegpt"]["n"] == 2 and "real" not in brief


def test_eval_refuses_negative_set_sizes(capsys):
    assert main(["aspd", "eval", "--sharegpt-n", "-1"]) != 0
    assert "--sharegpt-n" in capsys.readouterr().err


@pytest.mark.parametrize(
    "max_tokens", [3, 5, 8, 11, 14, 16, 18, 20, 22, 25, 28, 31, 34, 37, 39, 41, 48]
)
def test_engine_text_is_to_plain_of_the_raw_markup_on_the_eval_tasks(models, max_tokens):
    """The markup teacher-forced on the eval's own prompts (a random model writes none), the answer
    cut by max_tokens inside the titles list, a branch's forced "T:", a branch, or after the block:
    `.text` (what eval scores, what a stream sends) is to_plain of the raw markup, never markup."""
    llm = LLM(models[0], dtype="float32", plugin_params=ASPD)
    ids = MarkupIds.from_tokenizer(llm.tokenizer)
    for ex in heldout()[:4]:
        # three titles of two tokens: the list ends at token 15, the block's 24 tokens at 39
        titles = [
            list(t)
            for t in dict.fromkeys(
                tuple(llm.tokenizer.encode(w, add_bos=False)[:2]) for w in ex.prompt.split()
            )
        ][:3]
        llm.drafter.force = Script(
            ids, len(llm.tokenizer.encode(ex.prompt)), titles, [2, 5, 1][: len(titles)]
        )
        out = llm.generate(
            ex.prompt, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        )[0]
        raw = out.stats["aspd_raw_text"]
        assert out.text == to_plain(raw) and "<|" not in out.text, (raw, out.text)
        assert out.stats["aspd_blocks"] == (max_tokens >= 16)


@pytest.mark.slow
def test_trained_adapter_text_mismatches_are_zero():
    """The committed adapters on held-out tasks: the trained model writes blocks, and every
    answer's `.text` is to_plain of its raw markup."""
    folders = [str(model_folder(v, ADAPTER_DIR, EXPORT_DIR)) for v in ("aspd", "control")]
    report = run_eval(*folders, heldout()[:3], max_tokens=160)
    assert report["text_mismatches"] == 0
    assert any("<|para|>" in r["raw"] for r in report["answers"]["aspd"])


def test_quick_eval_cli_prints_one_json_line(models, tmp_path, capsys):
    data = tmp_path / "heldout.jsonl"
    write_jsonl(data, synth.generate(2, 1000))
    aspd, control = models
    assert (
        main(
            [
                "aspd",
                "eval",
                "--quick",
                "--n",
                "1",
                "--real-n",
                "1",
                "--base-model",
                control,
                "--max-tokens",
                "8",
                "--data",
                str(data),
                "--aspd-model",
                aspd,
                "--control-model",
                control,
                "--out",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and KEYS <= set(json.loads(lines[0]))
    assert (
        json.loads((tmp_path / "r.json").read_text())["answers"]["control"][0]["id"]
        == "t1000-00000"
    )


def test_eval_without_the_markup_tokens_fails_clearly(models, capsys):
    _, control = models
    assert (
        main(
            [
                "aspd",
                "eval",
                "--quick",
                "--n",
                "1",
                "--aspd-model",
                control,
                "--control-model",
                control,
            ]
        )
        == 2
    )
    assert "lacks the ASPD tokens" in capsys.readouterr().err
