"""engine_args: each engine option declared once, checked once (one line naming the field), and the
front ends (LLM, the CLI flags, config.json, Ray Serve, bench) built from that one declaration."""

from __future__ import annotations

import argparse
import inspect

import pytest

from paraspec.api import LLM
from paraspec.bench.plan import Plan, add_bench_flags
from paraspec.cli_flags import add_model_args, add_plugin_args, engine_args_from_cli
from paraspec.config import PluginConfig, parse_plugin_params
from paraspec.engine_args import DEFAULTS, EngineArgs, spec
from paraspec.errors import ConfigError
from paraspec.ray_serve.options import RayServeOptions
from paraspec.server.config import ServiceConfigError
from paraspec.server.config_loader import parse_config


@pytest.mark.parametrize(
    "field,bad,fix",
    [
        ("dtype", "float16", "use 'auto', 'bfloat16' or 'float32'"),
        ("quantization", "int4", "use 'w8a8', 'gguf'"),
        ("kv_cache_dtype", "bf16", "use 'fp32' (default) or 'fp16'"),
        ("activation_passes", 3, "use 'auto' (default), 1"),
        ("activation_passes", True, "use 'auto' (default), 1"),
        ("num_threads", 0, "use a positive integer"),
        ("max_batch_size", 300, "use an integer from 1 to 256"),
        ("prefill_chunk", 8, "use an integer from 16 to 8192"),
        ("prefix_cache_mb", -1, "use a number of MB from 0 (off)"),
        ("speculation_gamma", 2000, "use an integer from 0 to 1024"),
        ("draft_gate", 1, "use true (default), false"),
        ("draft_gate", "off", "use true (default), false"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field_and_the_fix(field, bad, fix):
    with pytest.raises(ConfigError) as e:
        EngineArgs(**{field: bad}).check()
    assert (
        str(e.value).startswith(f"{field}={bad!r} ")
        and fix in str(e.value)
        and "\n" not in str(e.value)
    )
    assert e.value.param == field


def test_check_normalises_a_flags_string_and_parses_plugin_params():
    args = EngineArgs(
        activation_passes="1", plugin_params='{"plugin_type": "la", "level": 3}'
    ).check()
    assert args.activation_passes == 1 and isinstance(args.plugin, PluginConfig)
    assert args.check() == args  # a PluginConfig passes through
    with pytest.raises(
        ConfigError, match="speculation_gamma=4 is smaller than plugin_params.decoding_"
    ):
        EngineArgs(plugin_params={"plugin_type": "memory_decoding"}, speculation_gamma=4).check()


def test_llm_flags_config_json_ray_and_bench_take_the_declared_defaults():
    sig = inspect.signature(LLM.__init__).parameters
    assert {name: sig[name].default for name in sig if name != "self"} == {
        name: getattr(DEFAULTS, name) for name in sig if name != "self"
    }
    p = argparse.ArgumentParser()
    add_model_args(p)
    add_plugin_args(p)
    assert engine_args_from_cli(p.parse_args([])) == DEFAULTS
    assert engine_args_from_cli(p.parse_args(["--activation-passes", "2"])).activation_passes == 2
    schedule = parse_config({}).schedule
    assert (schedule.max_batch_size, schedule.prefill_chunk_size, schedule.prefix_cache_mb) == (
        DEFAULTS.max_batch_size,
        DEFAULTS.prefill_chunk,
        DEFAULTS.prefix_cache_mb,
    )
    assert RayServeOptions().engine == DEFAULTS
    bench = argparse.ArgumentParser()
    add_bench_flags(bench)
    assert Plan.from_args(bench.parse_args([])).engine == DEFAULTS


def test_config_json_ranges_are_the_declared_ones():
    high = spec("max_batch_size").high
    with pytest.raises(
        ServiceConfigError,
        match=f"ScheduleConfig.maxBatchSize={high + 1} is out of range; "
        f"use an integer from 1 to {high}",
    ):
        parse_config({"BackendConfig": {"ScheduleConfig": {"maxBatchSize": high + 1}}})


def test_plugin_facts_come_from_the_plugin_table():
    md = parse_plugin_params(
        {"plugin_type": "memory_decoding", "decoding_length": 8, "dynamic_algo": True}
    )
    la = parse_plugin_params({"plugin_type": "la", "level": 3, "window": 2, "guess_set_size": 2})
    aspd = parse_plugin_params({"plugin_type": "aspd", "drafter": {"plugin_type": "hybrid"}})
    assert (md.speculation_need, md.dynamic_algo) == (8, True)
    assert (la.speculation_need, la.dynamic_algo) == (la.params.query_tokens, False)
    assert aspd.drafting.plugin_type == "hybrid" and md.drafting is md
    # ASPD checks the tokenizer's markup
    assert aspd.kind.check_tokenizer is not md.kind.check_tokenizer
