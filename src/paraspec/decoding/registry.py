"""Drafters built from plugin configs, and what an engine's drafters share and outlive.

`PluginConfig` is a validated MindIE plugin_params (config.parse_plugin_params builds it): frozen,
so the config itself is the key of everything cached per configuration. `DrafterRegistry` is
owned by one engine and holds
  * the token trie, memory_decoding's memory: one per engine, shared by every memory drafter
    (default or per request) so that what any request wrote, all draft from;
  * the output memory (output_memory.py), the hybrid's suffix-matched past outputs: one per
    engine likewise, shared by every hybrid drafter, saved with the trie (memory_file.py);
  * the arm statistics of each configuration (whether a lookahead window pays is learnt across
    all of that configuration's requests, and outlives a drafter evicted from the cache);
  * the drafters built per configuration (a request's plugin override reuses the one built for
    the same config, with its measured acceptance).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .arms import ArmStats
from .output_memory import OutputMemory
from .proposer import Proposer
from .trie import TokenTrie

MAX_CACHED_DRAFTERS = 16     # per-configuration drafters kept built (oldest evicted first)


@dataclass(frozen=True)
class PluginConfig:
    plugin_type: str     # "memory_decoding" | "lookahead" | "hybrid" | "aspd"
    params: Any          # that algorithm's params: a frozen dataclass (hashable)

    @property
    def speculation_need(self) -> int:
        """The speculationGamma the algorithm needs: its decoding_length (memory_decoding,
        hybrid), (N-1)(W+G) query tokens (lookahead)."""
        return self.params.query_tokens if self.plugin_type == "lookahead" else self.params.decoding_length

    @property
    def dynamic_algo(self) -> bool:
        """memory_decoding's dynamic_algo (MindIE's flag; the server checks maxIterTimes for it)."""
        return self.plugin_type == "memory_decoding" and self.params.dynamic_algo


def build_drafter(plugin: PluginConfig, eos_token_ids: Iterable[int], trie: TokenTrie | None = None,
                  arms: ArmStats | None = None, output_memory: OutputMemory | None = None) -> Proposer:
    """A new drafter for `plugin`. Memory drafters draft from `trie`, hybrid ones from
    `output_memory` too (new ones if None); drafters with arms record into `arms` (new ones if None)."""
    eos = frozenset(int(t) for t in eos_token_ids)
    p = plugin.params
    if plugin.plugin_type == "memory_decoding":
        from .memory import MemoryDrafter
        return MemoryDrafter(p, eos_token_ids=eos, trie=trie)
    if plugin.plugin_type == "lookahead":
        from .lookahead import LookaheadDrafter
        return LookaheadDrafter(p, eos_token_ids=eos, arms=arms)
    if plugin.plugin_type == "hybrid":
        from .hybrid import HybridDrafter
        return HybridDrafter(p, eos_token_ids=eos, trie=trie, arms=arms, output_memory=output_memory)
    if plugin.plugin_type == "aspd":      # the serial segments' drafter inside the ASPD decoder
        from ..aspd.decode import AspdDecoder
        return AspdDecoder(p, None if p.drafter is None else build_drafter(p.drafter, eos, trie, arms, output_memory))
    raise ValueError(f"no drafter for plugin_type {plugin.plugin_type!r}")


def _memory_params(plugin: PluginConfig):
    """The memory_decoding params inside a plugin config, or None if it keeps no trie."""
    if plugin.plugin_type == "memory_decoding":
        return plugin.params
    if plugin.plugin_type == "hybrid":
        return plugin.params.memory
    if plugin.plugin_type == "aspd" and plugin.params.drafter is not None:
        return _memory_params(plugin.params.drafter)
    return None


def _uses_output_memory(plugin: PluginConfig) -> bool:
    if plugin.plugin_type == "aspd" and plugin.params.drafter is not None:
        return _uses_output_memory(plugin.params.drafter)
    return plugin.plugin_type == "hybrid"


class DrafterRegistry:
    def __init__(self, eos_token_ids: Iterable[int], max_cached: int = MAX_CACHED_DRAFTERS):
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self.max_cached = max_cached
        self._trie: TokenTrie | None = None
        self._output_memory: OutputMemory | None = None
        self._arms: dict[PluginConfig, ArmStats] = {}
        self._drafters: dict[PluginConfig, Proposer] = {}

    @property
    def has_trie(self) -> bool:
        return self._trie is not None

    def trie(self, max_nodes: int | None = None, window: int | None = None) -> TokenTrie:
        """The engine's trie, created on first use with the first memory drafter's node budget
        and window (or the defaults)."""
        if self._trie is None:
            kwargs = {k: v for k, v in (("max_nodes", max_nodes), ("window", window)) if v is not None}
            self._trie = TokenTrie(**kwargs)
        return self._trie

    @property
    def has_output_memory(self) -> bool:
        return self._output_memory is not None

    def output_memory(self) -> OutputMemory:
        """The engine's memory of finished outputs (the hybrid's suffix source), created on first use."""
        if self._output_memory is None:
            self._output_memory = OutputMemory()
        return self._output_memory

    def arm_stats(self, plugin: PluginConfig, n_arms: int = 2) -> ArmStats:
        if plugin not in self._arms:
            self._arms[plugin] = ArmStats(n_arms)
        return self._arms[plugin]

    def drafter(self, plugin: PluginConfig | None) -> Proposer | None:
        """The engine's drafter for `plugin` (built on first use, then cached); None: plain decoding."""
        if plugin is None:
            return None
        if plugin not in self._drafters:
            if len(self._drafters) >= self.max_cached:      # its running requests keep their reference
                self._drafters.pop(next(iter(self._drafters)))
            mem = _memory_params(plugin)
            trie = self.trie(mem.max_trie_nodes, mem.window) if mem is not None else None
            outputs = self.output_memory() if _uses_output_memory(plugin) else None
            self._drafters[plugin] = build_drafter(plugin, self.eos, trie, self.arm_stats(plugin), outputs)
        return self._drafters[plugin]

    def private(self, plugin: PluginConfig) -> Proposer:
        """A new drafter with an empty trie and output memory of its own (a memory cold start:
        benchmarks whose systems must not see each other's outputs), recording into the engine's arm statistics
        (whether a window pays is the machine's property, learnt once per configuration)."""
        return build_drafter(plugin, self.eos, None, self.arm_stats(plugin))

    def drafters(self) -> list[Proposer]:
        return list(self._drafters.values())
