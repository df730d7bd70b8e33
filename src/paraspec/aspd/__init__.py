"""ASPD (adaptive serial-parallel decoding, arXiv 2508.08895): markup, layout, grammar, branch decoding,
and (TRAIN's modules) data, training and evaluation. See README "ASPD" and shared/research/aspd.md.

Importing this package registers plugin_type "aspd" with the decoding layer (decoding/plugins.py),
which never imports it: a decode mode built on top of the drafters names itself to them."""
from __future__ import annotations

from ..decoding.plugins import PluginType, register_plugin


def _params():
    from .params import AspdParams
    return AspdParams


def _decoder(p, eos, trie, arms, output_memory, inner):
    from .decode import AspdDecoder
    return AspdDecoder(p, inner)        # inner: the serial segments' drafter (p.drafter built), or None


register_plugin("aspd", PluginType(_params, _decoder, inner=lambda p: p.drafter))
