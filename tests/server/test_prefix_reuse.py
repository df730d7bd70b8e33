"""Prefix reuse through the server: a conversation's later turns report the prompt tokens whose KV
was reused (usage.prompt_tokens_details.cached_tokens, as OpenAI reports them), /metrics counts the
hits, and the answers are the offline engine's without any cache; config.json's prefixCacheMB is
validated like every other key."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from live_server import LiveServer
from paraspec import LLM, SamplingParams
from paraspec.server import create_app, load_config
from paraspec.server.config import ServiceConfigError
from paraspec.server.config_loader import parse_config

CHUNK = 16
SYSTEM = "You answer in one short sentence, politely, and never ask questions back. "


@pytest.fixture(scope="module")
def server(model_dir):
    llm = LLM(str(model_dir), dtype="float32", prefill_chunk=CHUNK)
    config = load_config(None, model=str(model_dir), plugin_flags=True, plugin_params=None)
    config.model_deploy.model.model_name = "tiny"
    with LiveServer(create_app(llm, config)) as s:
        yield s


def test_later_turns_report_cached_tokens_and_match_the_uncached_engine(server, model_dir):
    offline = LLM(str(model_dir), dtype="float32", prefill_chunk=CHUNK, prefix_cache_mb=0)
    messages = [{"role": "system", "content": SYSTEM}]
    cached = []
    for turn, question in enumerate(["Name a colour.", "And a fruit?", "And a city?"]):
        messages.append({"role": "user", "content": question})
        want = offline.chat(messages, SamplingParams(temperature=0, max_tokens=12))[0]
        if turn < 2:
            r = server.client.chat.completions.create(
                model="tiny", messages=messages, max_tokens=12, temperature=0
            )
            text, usage = r.choices[0].message.content, r.usage
        else:  # streamed: the usage chunk carries it too
            chunks = list(
                server.client.chat.completions.create(
                    model="tiny",
                    messages=messages,
                    max_tokens=12,
                    temperature=0,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            usage = chunks[-1].usage
        assert text == want.text
        assert usage.prompt_tokens == len(want.prompt_token_ids)
        cached.append(usage.prompt_tokens_details.cached_tokens)
        messages.append({"role": "assistant", "content": text})
    assert cached[0] == 0 and all(c >= CHUNK and c % CHUNK == 0 for c in cached[1:])
    families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}

    def value(name: str) -> float:
        return sum(s.value for s in families[name].samples)

    assert value("paraspec_prefix_cache_hits") >= 2
    assert value("paraspec_prefix_cache_reused_tokens") == sum(cached)
    assert (
        value("paraspec_prefix_cache_blocks") >= 1
        and value("paraspec_prefix_cache_budget_bytes") > 0
    )


def test_prefix_cache_mb_in_config_json():
    raw = {
        "BackendConfig": {
            "ModelDeployConfig": {"ModelConfig": [{"modelWeightPath": "default"}]},
            "ScheduleConfig": {"prefixCacheMB": 64},
        }
    }
    assert parse_config(raw).schedule.prefix_cache_mb == 64
    for bad, why in ((-1, "out of range"), ("64", "JSON number")):
        raw["BackendConfig"]["ScheduleConfig"]["prefixCacheMB"] = bad
        with pytest.raises(ServiceConfigError, match=f"ScheduleConfig.prefixCacheMB.*{why}"):
            parse_config(raw)
    assert load_config(None, prefix_cache_mb=0).schedule.prefix_cache_mb == 0  # --prefix-cache-mb 0
