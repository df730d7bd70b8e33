"""Typed engine configuration and the MindIE-style `plugin_params` that choose parallel decoding.

plugin_params is a JSON string (or dict), as in MindIE's ModelConfig:
    {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": true}
    {"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}     ("lookahead" works too)
    {"plugin_type": "hybrid", ...}                                           (both drafters, one budget)
Each algorithm's own parameters are validated by its params class, with speculation_gamma.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

PLUGIN_ALIASES = {"memory_decoding": "memory_decoding", "la": "lookahead", "lookahead": "lookahead",
                  "hybrid": "hybrid"}
QUANTIZATIONS = ("w8a8",)


@dataclass(frozen=True)
class PluginConfig:
    plugin_type: str     # "memory_decoding" | "lookahead" | "hybrid"
    params: Any          # that algorithm's params dataclass


@dataclass
class EngineConfig:
    dtype: str = "bfloat16"
    quantization: str | None = None
    max_batch_size: int = 8
    speculation_gamma: int | None = None   # MindIE speculationGamma: max draft tokens per step
    plugin: PluginConfig | None = None

    def __post_init__(self) -> None:
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"quantization={self.quantization!r} is not supported; use 'w8a8', 'none' or 'auto' "
                              "(chosen for this CPU)")
        if not isinstance(self.max_batch_size, int) or not 1 <= self.max_batch_size <= 256:
            raise ConfigError(f"max_batch_size={self.max_batch_size!r} is invalid; use an integer from 1 to 256")


def parse_plugin_params(value: str | dict | None, speculation_gamma: int | None = None) -> PluginConfig | None:
    """MindIE plugin_params (JSON string or dict) -> PluginConfig, validated. None/"" -> None."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"plugin_params is not valid JSON ({e.msg} at char {e.pos}); pass e.g. "
                              '\'{"plugin_type":"memory_decoding","decoding_length":16}\'') from None
    if not isinstance(value, dict):
        raise ConfigError("plugin_params must be a JSON object such as {\"plugin_type\": \"memory_decoding\"}")
    raw_type = value.get("plugin_type")
    if not isinstance(raw_type, str):
        raise ConfigError("plugin_params.plugin_type is missing; use 'memory_decoding', 'la' (lookahead) or 'hybrid'")
    kinds = [k.strip() for k in raw_type.split(",") if k.strip()]
    if len(kinds) > 1:
        raise ConfigError(f"plugin_params.plugin_type={raw_type!r} enables several algorithms at once; pick one, "
                          "or use 'hybrid' to merge memory_decoding and lookahead drafts")
    kind = PLUGIN_ALIASES.get(raw_type.strip())
    if kind is None:
        raise ConfigError(f"plugin_params.plugin_type={raw_type!r} is unknown; use 'memory_decoding', 'la' "
                          "(lookahead) or 'hybrid'")
    rest = {k: v for k, v in value.items() if k != "plugin_type"}
    params = _params_class(kind).from_dict(rest)
    params.validate(speculation_gamma)
    return PluginConfig(kind, params)


def _params_class(kind: str):
    if kind == "memory_decoding":
        from .decoding.memory import MemoryDecodingParams
        return MemoryDecodingParams
    if kind == "lookahead":
        from .decoding.lookahead import LookaheadParams
        return LookaheadParams
    from .decoding.hybrid import HybridParams
    return HybridParams


def build_drafter(plugin: PluginConfig | None, tokenizer, engine, private_memory: bool = False):
    """The drafter for a plugin config. Memory drafters share the engine's trie (or, with
    private_memory, get an empty one of their own, e.g. to benchmark from a cold start), and
    drafters that weigh draft length against verification cost get the runner's cost curve
    and the engine's record of which of their arms paid."""
    if plugin is None:
        return None
    from .decoding.trie import TokenTrie

    def trie(max_nodes: int, window: int) -> TokenTrie:
        return TokenTrie(max_nodes, window) if private_memory else engine.shared_trie(max_nodes, window)
    eos = set(tokenizer.eos_token_ids)
    p = plugin.params
    if plugin.plugin_type == "memory_decoding":
        from .decoding.memory import MemoryDrafter
        drafter = MemoryDrafter(p, trie=trie(p.max_trie_nodes, p.window), eos_token_ids=eos)
    elif plugin.plugin_type == "lookahead":
        from .decoding.lookahead import LookaheadDrafter
        drafter = LookaheadDrafter(p, eos_token_ids=eos)
    else:
        from .decoding.hybrid import HybridDrafter
        drafter = HybridDrafter(p, trie=trie(p.memory.max_trie_nodes, p.memory.window), eos_token_ids=eos)
    if hasattr(drafter, "set_forward_cost"):
        drafter.set_forward_cost(engine.runner.forward_cost())
    if hasattr(drafter, "arms"):   # window-or-not evidence is the engine's, not one drafter's
        drafter.arms = engine.arm_stats(f"{plugin.plugin_type}:{p!r}", drafter.arms.n_arms)
    return drafter
