"""ASPD (adaptive serial-parallel decoding, arXiv 2508.08895): markup, layout, grammar, branch decoding,
and (TRAIN's modules) data, training and evaluation. See README "ASPD" and shared/research/aspd.md.

PLUGIN is plugin_type "aspd" for the decoding layer's table (decoding/drafters/plugins.py), which never
imports this package: paraspec/engine_args.py registers it."""

from __future__ import annotations

from ..decoding.drafters.plugins import PluginType


def _params():
    from .params import AspdParams

    return AspdParams


def _decoder(p, eos, trie, arms, output_memory, inner, model=None):
    from .decode import AspdDecoder

    return AspdDecoder(p, inner)  # inner: the serial segments' drafter (p.drafter built), or None


def _check_tokenizer(tokenizer) -> None:
    from .markup import MarkupIds

    MarkupIds.from_tokenizer(tokenizer)  # a model not trained for ASPD fails here


PLUGIN = PluginType(_params, _decoder, inner=lambda p: p.drafter, check_tokenizer=_check_tokenizer)
