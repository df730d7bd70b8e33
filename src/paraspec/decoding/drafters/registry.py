"""Drafters built from plugin configs, and what an engine's drafters share and outlive.

`PluginConfig` is a validated MindIE plugin_params (plugins.parse_plugin_params builds it): frozen,
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

from typing import TYPE_CHECKING

from collections.abc import Callable, Iterable

from .arms import ArmStats
from ..memory.output_memory import OutputMemory
from .plugins import PluginConfig
from ..contract.proposer import Proposer
from ..memory.trie import TokenTrie

if TYPE_CHECKING:
    from .draft_head import HeadModel

MAX_CACHED_DRAFTERS = 16  # per-configuration drafters kept built (oldest evicted first)


def build_drafter(
    plugin: PluginConfig,
    eos_token_ids: Iterable[int],
    trie: TokenTrie | None = None,
    arms: ArmStats | None = None,
    output_memory: OutputMemory | None = None,
    model: HeadModel | None = None,
) -> Proposer:
    """A new drafter for `plugin`. Memory drafters draft from `trie`, hybrid ones from
    `output_memory` too (new ones if None); drafters with arms record into `arms` (new ones if None).
    A type that wraps another drafter (ASPD's serial segments) gets that one built first. `model`:
    what a draft head drafts with (draft_head.py), where the caller has the model."""
    eos = frozenset(int(t) for t in eos_token_ids)
    kind = plugin.kind
    inner = kind.inner(plugin.params)
    inner_drafter = (
        None if inner is None else build_drafter(inner, eos, trie, arms, output_memory, model)
    )
    return kind.build(plugin.params, eos, trie, arms, output_memory, inner_drafter, model=model)


class DrafterRegistry:
    def __init__(
        self,
        eos_token_ids: Iterable[int],
        max_cached: int = MAX_CACHED_DRAFTERS,
        model: Callable[[], HeadModel] | None = None,
    ):
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self._model = model  # the engine's model as a draft head sees it (built on first need)
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
            kwargs = {
                k: v for k, v in (("max_nodes", max_nodes), ("window", window)) if v is not None
            }
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
            if len(self._drafters) >= self.max_cached:  # its running requests keep their reference
                self._drafters.pop(next(iter(self._drafters)))
            drafting = plugin.drafting  # the type that keeps the memories (ASPD: its inner one)
            mem = drafting.kind.memory(drafting.params)  # memory_decoding params: a trie, or None
            trie = self.trie(mem.max_trie_nodes, mem.window) if mem is not None else None
            outputs = self.output_memory() if drafting.kind.output_memory else None
            self._drafters[plugin] = build_drafter(
                plugin, self.eos, trie, self.arm_stats(plugin), outputs, self.head_model()
            )
        return self._drafters[plugin]

    def private(self, plugin: PluginConfig) -> Proposer:
        """A new drafter with an empty trie and output memory of its own (a memory cold start:
        benchmarks whose systems must not see each other's outputs), recording into the engine's arm statistics
        (whether a window pays is the machine's property, learnt once per configuration)."""
        return build_drafter(
            plugin, self.eos, None, self.arm_stats(plugin), model=self.head_model()
        )

    def head_model(self) -> HeadModel | None:
        return None if self._model is None else self._model()

    def drafters(self) -> list[Proposer]:
        return list(self._drafters.values())
