"""bench/systems: every bench system by name, and a system that cannot run here as skipped."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from paraspec.bench.base import SkipSystem
from paraspec.bench.paraspec_systems import ParaspecSystem
from paraspec.bench.peers import TransformersSystem
from paraspec.bench.systems import (
    ALL_SYSTEMS,
    SystemContext,
    describe_skipped,
    is_known,
    make_system,
)
from paraspec.errors import ConfigError


@pytest.fixture
def ctx() -> SystemContext:
    llm = SimpleNamespace(
        config=SimpleNamespace(speculation_gamma=None), tokenizer=SimpleNamespace(eos_token_ids=[2])
    )
    return SystemContext(llm, "default", "float32", 1)


def test_paraspec_systems_and_sweep_points_by_name(ctx):
    ar = make_system("ar", ctx)
    assert isinstance(ar, ParaspecSystem) and ar.plugin is None and ar.info.kind == "paraspec"
    la = make_system("la-N3W5G2", ctx)
    assert la.plugin.plugin_type == "lookahead" and (
        la.plugin.params.level,
        la.plugin.params.window,
        la.plugin.params.guess_set_size,
    ) == (3, 5, 2)
    assert make_system("md-chain-L4", ctx).plugin.params.decoding_length == 4


def test_transformers_peers_share_one_model(ctx):
    hf, pld = make_system("hf", ctx), make_system("hf-pld", ctx)
    assert isinstance(hf, TransformersSystem) and hf.info.kind == "peer"
    assert (hf.prompt_lookup, pld.prompt_lookup) == (
        None,
        10,
    ) and hf.models is pld.models is ctx.hf_models


def test_a_peer_that_is_not_installed_is_skipped_with_the_reason(ctx, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(SkipSystem, match="llama-cpp-python is not installed"):
        make_system("llamacpp", ctx)
    info = describe_skipped("llamacpp", "llama-cpp-python is not installed")
    assert (info.kind, info.status, info.note) == (
        "peer",
        "skipped",
        "llama-cpp-python is not installed",
    )
    assert describe_skipped("md-tree-L4", "why").kind == "paraspec"


def test_unknown_names_are_a_user_error_naming_the_choices(ctx):
    assert not is_known("aspd") and "aspd" not in ALL_SYSTEMS  # no placeholder systems
    assert is_known("md-tree-L8") and is_known("hf-pld") and not is_known("md-tree-Lx")
    with pytest.raises(ConfigError, match="unknown bench system 'nope'; choose from ar, md-chain"):
        make_system("nope", ctx)


def test_invalid_sweep_parameters_are_refused_by_plugin_validation(ctx):
    with pytest.raises(ConfigError, match="decoding_length"):
        make_system("md-tree-L99", ctx)
