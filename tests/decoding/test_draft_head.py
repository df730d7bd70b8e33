"""The draft head: trained here on the bundled model's own hidden states, a source of the hybrid's
draft tree. Exact (greedy, seeded sampling), fed the verified rows' features, accepted where it
knows the text, and a bad head file refused in one line naming the field."""

import pytest
import torch

from paraspec import SamplingParams
from paraspec.config import parse_plugin_params
from paraspec.decoding.drafters.draft_head import HEAD_FORMAT, DraftHead
from paraspec.decoding.drafters.hybrid import HEAD
from paraspec.draft_head_train import features, train
from paraspec.draft_heads import head_model, trained_head_path
from paraspec.errors import ConfigError
from paraspec.sequence import sequence_stats

QUESTIONS = [
    "Name three primary colours and say one thing about each.",
    "Write a haiku about the sea.",
    "Explain what a hash table is in two sentences.",
    "Give me a short recipe for pancakes.",
]
GREEDY = SamplingParams(temperature=0, max_tokens=40)


@pytest.fixture(scope="module")
def trained(bundled_llm_default, tmp_path_factory):
    """A head trained on the model's greedy answers to QUESTIONS (it learns those answers), its
    file, the prompts and the answers."""
    llm = bundled_llm_default
    prompts = [llm.tokenizer.encode_chat([{"role": "user", "content": q}]) for q in QUESTIONS]
    answers = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
    data = [features(llm, p, list(a)) for p, a in zip(prompts, answers)]
    ck = train(llm, data, vocab_size=512, mlp=0, epochs=60, batch=32, lr=3e-3)
    path = tmp_path_factory.mktemp("head") / "head.pt"
    torch.save(ck, path)
    return ck, str(path), prompts, answers


def _run(llm, prompt, params, plugin=None, drafter=None):
    if plugin is not None:
        drafter = llm.engine.drafters.private(parse_plugin_params(plugin))
    (seq,) = llm.engine.add_request(prompt, params, drafter=drafter)
    llm.engine.run_until_done()
    return seq


def test_training_learns_the_answers(trained):
    ck = trained[0]
    assert ck["format"] == HEAD_FORMAT and ck["accuracy"] > 0.8
    assert ck["rows"] == sum(
        len(a) + 1 for a in trained[3]
    )  # the prompt's last row and the answer's


def test_head_drafts_are_exact_and_accepted(bundled_llm_default, trained):
    """On answers it learnt, the hybrid with the head needs fewer steps than without, and writes
    exactly plain decoding's tokens; its own nodes gave accepted tokens."""
    llm, (_, path, prompts, answers) = bundled_llm_default, trained
    steps = {"plain": 0, "head": 0}
    for prompt, answer in zip(prompts, answers):
        plain = _run(llm, prompt, GREEDY, {"plugin_type": "hybrid"})
        drafter = llm.engine.drafters.private(
            parse_plugin_params({"plugin_type": "hybrid", "draft_head": path})
        )
        gain = drafter.policy.stats.gain[HEAD]
        head = _run(llm, prompt, GREEDY, drafter=drafter)
        assert head.output == plain.output == list(answer)
        assert drafter.policy.stats.gain[HEAD] > gain  # tokens only the head's nodes gave
        steps["plain"] += sequence_stats(plain)["forward_passes"]
        steps["head"] += sequence_stats(head)["forward_passes"]
    assert steps["head"] < 0.8 * steps["plain"], steps


def test_head_is_exact_on_new_prompts_and_seeded_sampling(bundled_llm_default, trained):
    llm, path = bundled_llm_default, trained[1]
    plugin = {"plugin_type": "hybrid", "draft_head": path}
    prompt = llm.tokenizer.encode_chat([{"role": "user", "content": "List four kinds of trees."}])
    assert _run(llm, prompt, GREEDY, plugin).output == _run(llm, prompt, GREEDY).output
    sampled = SamplingParams(temperature=0.8, top_p=0.95, seed=7, max_tokens=40)
    for p in trained[2][:2] + [prompt]:
        assert _run(llm, p, sampled, plugin).output == _run(llm, p, sampled).output


def test_the_head_is_fed_the_verified_rows_features(bundled_llm_default, trained):
    """After the prefill and after each step the drafter gets the feature of the row that chose
    the last committed token (the prompt's last row, then each step's): the same hidden state a
    teacher-forced prefill of the text gives that row."""
    llm, (_, path, prompts, _) = bundled_llm_default, trained
    drafter = llm.engine.drafters.private(
        parse_plugin_params({"plugin_type": "hybrid", "draft_head": path})
    )
    committed, seen = [], []
    observe, observe_feature = drafter.observe, drafter.observe_feature

    def spy_observe(key, tokens, lookahead_argmax=None):
        committed.extend(tokens)
        observe(key, tokens, lookahead_argmax)

    def spy_feature(key, feature, token):
        seen.append((len(committed), feature.clone(), token))
        observe_feature(key, feature, token)

    drafter.observe, drafter.observe_feature = spy_observe, spy_feature
    seq = _run(llm, prompts[0], GREEDY, drafter=drafter)
    assert committed == seq.output[1:]  # the first token comes from the prefill
    assert len(seen) > 1 and seen[0][0] == 0  # the prefill's feature, before any step
    rows = features(llm, prompts[0], seq.output)["h"].float()
    for n, feature, token in seen:
        # n tokens committed after the prefill's first: the row that chose output[n] reads
        # output[n-1] (row 0: the prompt's last)
        assert token == seq.output[n]
        assert torch.cosine_similarity(feature.float(), rows[n], dim=0) > 0.999


def test_bad_head_files_are_refused_in_one_line(
    bundled_llm_default, trained, tmp_path, monkeypatch
):
    llm, ck = bundled_llm_default, trained[0]
    monkeypatch.setenv("PARASPEC_CACHE", str(tmp_path))  # no head trained for it there: "auto"
    model = head_model(llm.model, llm.model_name)

    def refused(path) -> str:
        with pytest.raises(ConfigError) as e:
            DraftHead.load(str(path), model)
        msg = str(e.value)
        assert "\n" not in msg and "plugin_params.draft_head" in msg
        return msg

    assert "no such file" in refused(tmp_path / "missing.pt")
    (tmp_path / "text.pt").write_text("not a head")
    assert "not a draft head file" in refused(tmp_path / "text.pt")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    assert "is not a" in refused(tmp_path / "other.pt")
    torch.save(ck | {"dim": ck["dim"] + 1}, tmp_path / "shape.pt")
    assert "hidden size" in refused(tmp_path / "shape.pt")
    torch.save(ck | {"fingerprint": ck["fingerprint"] * 2}, tmp_path / "print.pt")
    assert "another model" in refused(tmp_path / "print.pt")
    assert "no head trained for" in refused("auto")
    with pytest.raises(ConfigError, match="draft_head"):
        parse_plugin_params({"plugin_type": "hybrid", "draft_head": 5})
    # an engine refuses the plugin when it builds the drafter, not on a later request
    with pytest.raises(ConfigError, match="draft_head"):
        llm.engine.drafters.drafter(
            parse_plugin_params({"plugin_type": "hybrid", "draft_head": str(tmp_path / "x.pt")})
        )


def test_auto_finds_the_head_trained_for_the_model(
    bundled_llm_default, trained, monkeypatch, tmp_path
):
    llm, path = bundled_llm_default, trained[1]
    monkeypatch.setenv("PARASPEC_CACHE", str(tmp_path))
    target = trained_head_path(llm.model_name)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(open(path, "rb").read())
    drafter = llm.engine.drafters.private(
        parse_plugin_params({"plugin_type": "hybrid", "draft_head": "auto"})
    )
    assert drafter.wants_features and drafter.head.head.vocab.numel() == 512


def test_a_drafter_built_without_the_model_refuses_a_head(trained):
    from paraspec.decoding.drafters.registry import DrafterRegistry

    reg = DrafterRegistry([0])
    with pytest.raises(ConfigError, match="draft_head"):
        reg.private(parse_plugin_params({"plugin_type": "hybrid", "draft_head": trained[1]}))


def test_cli_checks_its_numbers_before_loading_a_model(capsys):
    from paraspec.cli import main

    assert main(["draft-head", "--epochs", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--epochs" in err
