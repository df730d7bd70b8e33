"""The systems `paraspec bench` compares, by name: paraspec's own (paraspec_systems.py) and its
peers (peers.py), all behind the interface in base.py.

    ar, md-tree, md-chain, md-tree-dyn, md-chain-dyn, la, hybrid   paraspec, one plugin_params each
    md-tree-L<n>, md-chain-L<n>, la-N<n>W<w>G<g>                   sweep points
    hf, hf-pld, llamacpp, llamacpp-pld                             transformers, llama-cpp-python
    llamaserver, llamaserver-ngram-mod, llamaserver-ngram-mod-long,  llama.cpp's llama-server, plain and
    llamaserver-ngram-map-k, llamaserver-ngram-cache                 its n-gram drafts (llama_server.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .base import System, SystemInfo
from .llama_server import LLAMA_SERVER_SYSTEMS, LlamaServerSystem
from .paraspec_systems import PARASPEC_SYSTEMS, ParaspecSystem, sweep_plugin
from .peers import PEER_SYSTEMS, PLD_TOKENS, HFModelCache, LlamaCppSystem, TransformersSystem

ALL_SYSTEMS = (*PARASPEC_SYSTEMS, *PEER_SYSTEMS, *LLAMA_SERVER_SYSTEMS)


@dataclass
class SystemContext:
    llm: Any  # paraspec.LLM shared by every paraspec system
    model: str
    dtype: str
    threads: int
    hf_models: HFModelCache | None = None
    memory_file: str | None = None


def make_system(name: str, ctx: SystemContext) -> System:
    """The system called `name`; raises SkipSystem (with the reason) when it cannot run here."""
    if name in PARASPEC_SYSTEMS or sweep_plugin(name) is not None:
        plugin = PARASPEC_SYSTEMS[name] if name in PARASPEC_SYSTEMS else sweep_plugin(name)
        return ParaspecSystem(name, ctx.llm, plugin, ctx.memory_file)
    if name in ("hf", "hf-pld"):
        if ctx.hf_models is None:
            ctx.hf_models = HFModelCache(ctx.model, ctx.dtype)
        return TransformersSystem(
            name,
            ctx.hf_models,
            set(ctx.llm.tokenizer.eos_token_ids),
            PLD_TOKENS if name == "hf-pld" else None,
        )
    if name in ("llamacpp", "llamacpp-pld"):
        return LlamaCppSystem(
            name, ctx.model, ctx.threads, PLD_TOKENS if name == "llamacpp-pld" else None
        )
    if name in LLAMA_SERVER_SYSTEMS:  # a context up to paraspec's own: the prompts it runs fit
        return LlamaServerSystem(name, ctx.model, ctx.threads, ctx.llm.runner.max_seq_len)
    raise ConfigError(
        f"unknown bench system {name!r}; choose from {', '.join(ALL_SYSTEMS)}, "
        "md-tree-L<n>, md-chain-L<n> or la-N<n>W<w>G<g>"
    )


def is_known(name: str) -> bool:
    return name in ALL_SYSTEMS or sweep_plugin(name) is not None


def describe_skipped(name: str, reason: str) -> SystemInfo:
    kind = "paraspec" if name in PARASPEC_SYSTEMS or sweep_plugin(name) else "peer"
    return SystemInfo(name, kind, name, PARASPEC_SYSTEMS.get(name), status="skipped", note=reason)
