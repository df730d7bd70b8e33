"""cli_flags: the model and plugin flags several sub-commands share, read back into plugin_params."""

from __future__ import annotations

import argparse

import pytest

from paraspec.cli_flags import add_model_args, add_plugin_args, plugin_params_from_args
from paraspec.errors import ParaspecError


def parse(*argv: str, default_plugin: str | None = "none") -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_model_args(p)
    add_plugin_args(p, default_plugin=default_plugin)
    return p.parse_args(list(argv))


def test_model_flags_and_their_defaults():
    a = parse()
    assert (a.model, a.dtype, a.quantization, a.threads, a.kv_cache_dtype) == (
        "default",
        "auto",
        "auto",
        None,
        "fp32",
    )
    assert parse("--kv-cache-dtype", "fp16").kv_cache_dtype == "fp16"
    for bad in (("--dtype", "float16"), ("--kv-cache-dtype", "bf16")):
        with pytest.raises(SystemExit):
            parse(*bad)


def test_plugin_and_its_flags_become_plugin_params():
    assert plugin_params_from_args(parse()) is None
    assert plugin_params_from_args(parse("--plugin", "none")) is None
    assert plugin_params_from_args(
        parse("--plugin", "memory_decoding", "--decoding-length", "8", "--dynamic-algo")
    ) == {"plugin_type": "memory_decoding", "decoding_length": 8, "dynamic_algo": True}
    assert plugin_params_from_args(
        parse("--plugin", "la", "--level", "4", "--window", "5", "--guess-set-size", "3")
    ) == {"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 3}
    assert (
        plugin_params_from_args(parse("--plugin-params", '{"plugin_type":"hybrid"}'))
        == '{"plugin_type":"hybrid"}'
    )


def test_a_default_of_none_tells_not_given_from_none():
    assert parse(default_plugin=None).plugin is None
    assert parse("--plugin", "none", default_plugin=None).plugin == "none"
    assert plugin_params_from_args(parse(default_plugin=None)) is None


@pytest.mark.parametrize(
    "argv,words",
    [
        (
            ["--decoding-length", "4"],
            "--decoding-length needs --plugin (memory_decoding, lookahead or hybrid)",
        ),
        (["--plugin", "none", "--guess-set-size", "4"], "--guess-set-size needs --plugin"),
        (
            ["--plugin", "la", "--plugin-params", "{}"],
            "pass either --plugin-params or --plugin with its flags, not both",
        ),
    ],
)
def test_contradictions_are_user_errors(argv, words):
    with pytest.raises(ParaspecError) as e:
        plugin_params_from_args(parse(*argv))
    assert words in str(e.value)
