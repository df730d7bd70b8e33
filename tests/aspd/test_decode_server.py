"""plugin aspd served: the OpenAI-compatible server (live uvicorn on 127.0.0.1, the official
openai client) over a tiny model with the six tokens added, the markup teacher-forced (untrained).
Text, streamed or not, is the plain answer and equals offline LLM.generate; the raw markup rides
in the `paraspec` stats; a model without the tokens fails with one clear line."""

import pytest

from aspd_engines import Script, save_aspd_folder
from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.aspd.markup import MarkupIds
from paraspec.errors import ModelLoadError
from paraspec.server import create_app, load_config
from paraspec.server.app import build_llm

PROMPT = "Colours: "
PLUGIN = {"plugin_type": "aspd"}


@pytest.fixture(scope="module")
def aspd_dir(tiny_model_dir, tmp_path_factory):
    return save_aspd_folder(tiny_model_dir("llama"), tmp_path_factory.mktemp("aspd-tiny"))


def _force(llm):
    ids = MarkupIds.from_tokenizer(llm.tokenizer)
    titles = [llm.tokenizer.encode(t) for t in ("red", "blue", "g")]
    llm.drafter.force = Script(ids, len(llm.tokenizer.encode(PROMPT)), titles, [3, 6, 2])
    return ids


def test_offline_api(aspd_dir):
    llm = LLM(str(aspd_dir), dtype="float32", plugin_params=PLUGIN)
    _force(llm)
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))[0]
    raw = out.stats["aspd_raw_text"]
    assert "<|para|>" in raw and "<|/para|>" in raw and raw.count("<|branch|>") == 3
    assert "<|" not in out.text and out.stats["aspd_blocks"] == 1
    assert out.stats["forward_passes"] == out.stats["decode_steps"] < len(out.token_ids)


def test_served_with_the_openai_client(aspd_dir):
    config = load_config(None, model=str(aspd_dir), plugin_flags=True, plugin_params=PLUGIN)
    config.model_deploy.model.model_name = "tiny"
    llm = build_llm(config, dtype="float32")
    offline = LLM(str(aspd_dir), dtype="float32", plugin_params=PLUGIN)
    _force(llm)
    _force(offline)
    ref = offline.generate(PROMPT, SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))[0]
    with LiveServer(create_app(llm, config)) as s:
        r = s.client.completions.create(
            model="tiny",
            prompt=PROMPT,
            max_tokens=50,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        assert r.choices[0].text == ref.text
        stats = r.model_extra["paraspec"]
        assert stats["plugin"] == "aspd" and "<|para|>" in stats["choices"][0]["aspd_raw_text"]
        chunks = list(
            s.client.completions.create(
                model="tiny",
                prompt=PROMPT,
                max_tokens=50,
                temperature=0,
                extra_body={"ignore_eos": True},
                stream=True,
            )
        )
        pieces = [c.choices[0].text for c in chunks if c.choices]
        assert "".join(pieces) == ref.text and not any("<|" in p for p in pieces)


def test_model_without_the_tokens_fails_clearly(tiny_model_dir):
    with pytest.raises(
        ModelLoadError, match=r"lacks the ASPD tokens .*; use a model trained for ASPD"
    ):
        LLM(str(tiny_model_dir("llama")), dtype="float32", plugin_params=PLUGIN)
