"""paraspec's own systems in `paraspec bench`: plain autoregressive decoding and each plugin_params.

They share one LLM (one model instance); each owns its drafter, built by the engine's drafter
registry, so switching systems is switching drafters, as `plugin_params=` per `generate` call does. Unlike
`LLM.generate(plugin_params=...)`, a memory_decoding system here keeps a trie of its own: with the
engine's shared trie, one system's output of a task would be in memory when the next system runs
the same task, and its speedup would be a replay.

Memory across requests: a memory system's trie is empty when a task set begins (cold: the prompt
and its own outputs are all it drafts from) and then accumulates the set's previous tasks (its own
outputs), as a server's would. "<system>+warm" ("hybrid+warm") is the same system whose memory
starts each set from a warm file instead (warm_memory.py: the model's own answers to a disjoint
ShareGPT sample); --memory FILE pre-fills every memory system, cold and warm alike. All runs of one task
(repeats, sampled runs) start from the same snapshot, taken at begin_task, so a repeat never finds
its own previous answer in memory; end_task keeps the state after the task's first run (the greedy
one when greedy is measured: the orchestrator runs greedy first).
"""

from __future__ import annotations

import copy
import json
import re
import time

from ..decoding.memory.memory_file import merge_memory_file
from ..errors import ConfigError
from .base import (
    GREEDY,
    SAMPLED_TEMPERATURE,
    SAMPLED_TOP_P,
    BenchTask,
    Measurement,
    RunParams,
    SkipSystem,
    SystemInfo,
)
from .peak_rss import PeakRSS

WARM_SUFFIX = "+warm"
MEMORY_PLUGINS = ("memory_decoding", "hybrid")  # the plugin types that keep a memory (a trie)

# name -> plugin_params (None = plain autoregressive decoding)
PARASPEC_SYSTEMS: dict[str, dict | None] = {
    "ar": None,
    "md-chain": {
        "plugin_type": "memory_decoding",
        "decoding_length": 16,
        "dynamic_algo": False,
        "mode": "chain",
    },
    "md-tree": {
        "plugin_type": "memory_decoding",
        "decoding_length": 16,
        "dynamic_algo": False,
        "mode": "tree",
    },
    "md-chain-dyn": {
        "plugin_type": "memory_decoding",
        "decoding_length": 16,
        "dynamic_algo": True,
        "mode": "chain",
    },
    "md-tree-dyn": {
        "plugin_type": "memory_decoding",
        "decoding_length": 16,
        "dynamic_algo": True,
        "mode": "tree",
    },
    "la": {"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5},
    "hybrid": {"plugin_type": "hybrid"},
    # with the draft head `paraspec draft-head` trained for the model (skipped where there is none)
    "hybrid-head": {"plugin_type": "hybrid", "draft_head": "auto"},
}


def sweep_plugin(name: str) -> dict | None:
    """Plugin params of a sweep system: "md-tree-L<decoding_length>" or "la-N<n>W<w>G<g>"."""
    if m := re.fullmatch(r"md-(tree|chain)-L(\d+)", name):
        return {
            "plugin_type": "memory_decoding",
            "decoding_length": int(m[2]),
            "dynamic_algo": False,
            "mode": m[1],
        }
    if m := re.fullmatch(r"la-N(\d+)W(\d+)G(\d+)", name):
        return {
            "plugin_type": "la",
            "level": int(m[1]),
            "window": int(m[2]),
            "guess_set_size": int(m[3]),
        }
    return None


def warm_base(name: str) -> str | None:
    """ "hybrid+warm" -> "hybrid"; None for a name without the suffix."""
    return name[: -len(WARM_SUFFIX)] if name.endswith(WARM_SUFFIX) else None


def plugin_of(name: str) -> dict | None:
    """The plugin_params of a paraspec system or sweep point (None: AR or not paraspec's)."""
    return PARASPEC_SYSTEMS.get(name) or sweep_plugin(name)


def keeps_memory(plugin_params: dict | None) -> bool:
    return plugin_params is not None and plugin_params.get("plugin_type") in MEMORY_PLUGINS


class ParaspecSystem:
    def __init__(
        self,
        name: str,
        llm,
        plugin_params: dict | None,
        memory_file: str | None = None,
        warm_file: str | None = None,
    ):
        from ..config import parse_plugin_params

        self.llm = llm
        self.memory_file = memory_file  # saved by LLM.save_memory: pre-fills every set's memory
        self.warm_file = warm_file  # a "+warm" system's: merged after memory_file
        # validates; may raise
        self.plugin = parse_plugin_params(plugin_params, llm.config.speculation_gamma)
        desc = (
            "paraspec, plain autoregressive"
            if plugin_params is None
            else f"paraspec, `{json.dumps(plugin_params)}`"
        )
        if warm_file:
            desc += f"; memory starts warm from {warm_file}"
        self.info = SystemInfo(name, "paraspec", desc, plugin_params)
        self._drafter = None  # the drafter carried across the tasks of a set
        self._snapshot = None  # its state at begin_task: every run of the task starts from it
        self._after_first = None  # its state after the task's first run

    def _new_drafter(self):
        if self.plugin is None:
            return None
        # every memory system gets a trie of its own: one system's answers must not feed another's
        drafter = self.llm.engine.drafters.private(self.plugin)
        for path in (self.memory_file, self.warm_file):
            if path and drafter.trie is not None:
                merge_memory_file(path, drafter.trie, getattr(drafter, "output_memory", None))
        return drafter

    def prepare(self) -> None:
        try:
            self.begin_set("")
        except ConfigError as e:
            if self.info.plugin_params and "draft_head" in self.info.plugin_params:
                raise SkipSystem(str(e)) from None  # no head trained for this model
            raise

    def begin_set(self, task_set: str) -> None:
        # an empty trie, unless --memory or a warm file pre-fills it
        self._drafter = self._new_drafter()

    def begin_task(self) -> None:
        self._snapshot, self._after_first = self._drafter, None

    def end_task(self) -> None:
        self._drafter = self._after_first if self._after_first is not None else self._snapshot
        self._snapshot = self._after_first = None

    def run(self, task: BenchTask, params: RunParams) -> Measurement:
        from ..api import sequence_stats
        from ..sampling.params import SamplingParams

        # A copy per run, outside the timed region (None for AR). The memo keeps a drafter that holds
        # the engine or model from copying them.
        keep = {
            id(o): o for o in (self.llm.engine, self.llm.runner, self.llm.model, self.llm.tokenizer)
        }
        drafter = copy.deepcopy(
            self._snapshot if self._snapshot is not None else self._drafter, keep
        )
        greedy = params.mode == GREEDY
        sp = SamplingParams(
            max_tokens=task.max_new_tokens,
            stop=list(task.stop),
            seed=params.seed,
            temperature=0.0 if greedy else SAMPLED_TEMPERATURE,
            top_p=1.0 if greedy else SAMPLED_TOP_P,
        )
        engine = self.llm.engine
        kv = 0

        # the cache is released when the sequence finishes: read it before
        def on_update(
            u,
        ) -> None:
            nonlocal kv
            if u.seq.cache is not None:
                kv = max(kv, u.seq.cache.nbytes())

        with PeakRSS() as mem:
            t0 = time.perf_counter()
            (seq,) = engine.add_request(task.prompt_ids, sp, drafter=drafter)
            engine.run_until_done(on_update)
            wall = time.perf_counter() - t0
        if self._snapshot is not None and self._after_first is None:
            self._after_first = drafter
        s = sequence_stats(seq)
        return Measurement(
            suite="main",
            system=self.info.name,
            task_set=task.task_set,
            task_id=task.task_id,
            mode=params.mode,
            repeat=params.repeat,
            prompt_tokens=s["prompt_tokens"],
            generated_tokens=s["generated_tokens"],
            wall_s=round(wall, 6),
            ttft_s=s["ttft_s"],
            decode_s=s["decode_s"],
            decode_tokens_per_s=s["tokens_per_s"],
            forward_passes=s["decode_steps"] + 1,
            mean_accepted_tokens_per_step=s["mean_accepted_tokens_per_step"],
            acceptance_rate=s["acceptance_rate"],
            accepted_hist=s["accepted_tokens_per_step_histogram"],
            draft_s=s["draft_s"],
            peak_rss_delta_bytes=mem.delta,
            kv_cache_bytes=kv or None,
            finish_reason=seq.finish_reason,
            token_ids=list(seq.output),
        )

    def close(self) -> None:
        self._drafter = self._snapshot = self._after_first = None
