"""The systems `paraspec bench` compares, behind one small interface.

    prepare()                    load what the system needs (not timed)
    begin_set(name)              a new task set: memory systems start from an empty trie (or --memory)
    begin_task() / end_task()    around all runs of one task (see "memory" below)
    run(task, params)            one generation -> Measurement
    close()

paraspec systems share one LLM (one model instance); each owns its drafter, built with
`config.build_drafter`, so switching systems is switching drafters, as `plugin_params=` per
`generate` call does. Unlike `LLM.generate(plugin_params=...)`, a memory_decoding system here keeps
a trie of its own: with the engine's shared trie, one system's output of a task would be in memory
when the next system runs the same task, and its speedup would be a replay.

Memory across requests: a memory system's trie is empty when a task set begins and then
accumulates the set's previous tasks (its own outputs), as a server's would. All runs of one task
(repeats, sampled runs) start from the same snapshot, taken at begin_task, so a repeat never finds
its own previous answer in memory; end_task keeps the state after the task's first run (the greedy
one when greedy is measured: the orchestrator runs greedy first).

Peers (transformers `generate`, llama-cpp-python) generate the token count paraspec AR produced for
the same run (params.target_tokens), stopping earlier only at EOS, so decode tokens/s are over the
same work.
"""
from __future__ import annotations

import copy
import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol

from ..errors import ConfigError

GREEDY, SAMPLED = "greedy", "sampled"
SAMPLED_TEMPERATURE = 0.8
SAMPLED_TOP_P = 0.95

# name -> plugin_params (None = plain autoregressive decoding)
PARASPEC_SYSTEMS: dict[str, dict | None] = {
    "ar": None,
    "md-chain": {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": False, "mode": "chain"},
    "md-tree": {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": False, "mode": "tree"},
    "md-chain-dyn": {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": True, "mode": "chain"},
    "md-tree-dyn": {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": True, "mode": "tree"},
    "la": {"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5},
    "hybrid": {"plugin_type": "hybrid"},
}
PEER_SYSTEMS = ("hf", "hf-pld", "llamacpp", "llamacpp-pld")
ALL_SYSTEMS = (*PARASPEC_SYSTEMS, "aspd", *PEER_SYSTEMS)
PLD_TOKENS = 10   # prompt-lookup draft length of both peers (transformers' documented example value)


def sweep_plugin(name: str) -> dict | None:
    """Plugin params of a sweep system: "md-tree-L<decoding_length>" or "la-N<n>W<w>G<g>"."""
    if m := re.fullmatch(r"md-(tree|chain)-L(\d+)", name):
        return {"plugin_type": "memory_decoding", "decoding_length": int(m[2]), "dynamic_algo": False, "mode": m[1]}
    if m := re.fullmatch(r"la-N(\d+)W(\d+)G(\d+)", name):
        return {"plugin_type": "la", "level": int(m[1]), "window": int(m[2]), "guess_set_size": int(m[3])}
    return None


# ------------------------------------------------------------------------------------------- data

@dataclass
class BenchTask:
    """A task as every system sees it: the same prompt token ids (paraspec's tokenizer)."""
    task_set: str
    task_id: str
    prompt_ids: list[int]
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    source: str = ""


@dataclass
class RunParams:
    mode: str = GREEDY            # GREEDY | SAMPLED
    seed: int = 0
    repeat: int = 0
    target_tokens: int | None = None   # peers: paraspec AR's generated token count for this run


@dataclass
class Measurement:
    """One generation of one task by one system. Times in seconds, memory in bytes."""
    suite: str                    # "main" | "sweep" | "ttft"
    system: str
    task_set: str
    task_id: str
    mode: str
    repeat: int
    prompt_tokens: int
    generated_tokens: int
    wall_s: float                 # the whole generate call
    ttft_s: float                 # prefill (+ drafter.begin) until the first token
    decode_s: float               # after the first token
    decode_tokens_per_s: float    # (generated - 1) / decode_s
    forward_passes: int | None    # prefill (counted once) + decode/verify forwards
    mean_accepted_tokens_per_step: float | None   # tokens a decode step emits, bonus included
    acceptance_rate: float | None
    accepted_hist: dict[str, int] | None          # tokens emitted per step -> steps
    draft_s: float | None
    peak_rss_delta_bytes: int | None   # VmHWM above the RSS at the start of this run (None: unmeasured)
    kv_cache_bytes: int | None
    finish_reason: str | None
    token_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class SystemInfo:
    name: str
    kind: str                     # "paraspec" | "peer"
    description: str
    plugin_params: dict | None = None
    status: str = "ok"            # "ok" | "skipped"
    note: str = ""


class System(Protocol):
    info: SystemInfo

    def prepare(self) -> None: ...
    def begin_set(self, task_set: str) -> None: ...
    def begin_task(self) -> None: ...
    def run(self, task: BenchTask, params: RunParams) -> Measurement: ...
    def end_task(self) -> None: ...
    def close(self) -> None: ...


class SkipSystem(Exception):
    """Raised by a system's constructor or prepare() when it cannot run here; the message says why."""


# ----------------------------------------------------------------------------------------- memory

_HWM = re.compile(r"VmHWM:\s+(\d+) kB")
_RSS = re.compile(r"VmRSS:\s+(\d+) kB")


class PeakRSS:
    """Peak resident memory of this process during a block, above its RSS at the start.

    Linux keeps the peak (VmHWM) per process and resets it to the current RSS when "5" is written
    to /proc/self/clear_refs, so each run gets its own peak although all systems share a process.
    Where that is impossible, `delta` stays None (no sampling thread: it would steal a core)."""

    def __init__(self) -> None:
        self.delta: int | None = None
        self._base: int | None = None

    @staticmethod
    def _read(pattern: re.Pattern) -> int:
        with open("/proc/self/status") as f:
            return int(pattern.search(f.read()).group(1)) * 1024

    def __enter__(self) -> "PeakRSS":
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self._base = self._read(_RSS)
        except (OSError, AttributeError):
            self._base = None
        return self

    def __exit__(self, *exc) -> None:
        if self._base is not None:
            self.delta = max(0, self._read(_HWM) - self._base)


# --------------------------------------------------------------------------------------- paraspec

class ParaspecSystem:
    def __init__(self, name: str, llm, plugin_params: dict | None, memory_file: str | None = None):
        from ..config import parse_plugin_params

        self.llm = llm
        self.memory_file = memory_file   # a trie saved by LLM.save_memory: pre-fills every set's memory
        self.plugin = parse_plugin_params(plugin_params, llm.config.speculation_gamma)  # validates; may raise
        desc = "paraspec, plain autoregressive" if plugin_params is None else f"paraspec, `{json.dumps(plugin_params)}`"
        self.info = SystemInfo(name, "paraspec", desc, plugin_params)
        self._drafter = None      # the drafter carried across the tasks of a set
        self._snapshot = None     # its state at begin_task: every run of the task starts from it
        self._after_first = None  # its state after the task's first run

    def _new_drafter(self):
        from ..config import build_drafter
        # every memory system gets a trie of its own: one system's answers must not feed another's
        drafter = build_drafter(self.plugin, self.llm.tokenizer, self.llm.engine, private_memory=True)
        if self.memory_file and getattr(drafter, "trie", None) is not None:
            drafter.trie.merge_file(self.memory_file)
        return drafter

    def prepare(self) -> None:
        self.begin_set("")

    def begin_set(self, task_set: str) -> None:
        self._drafter = self._new_drafter()   # an empty trie, unless --memory pre-fills it

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
        keep = {id(o): o for o in (self.llm.engine, self.llm.runner, self.llm.model, self.llm.tokenizer)}
        drafter = copy.deepcopy(self._snapshot if self._snapshot is not None else self._drafter, keep)
        greedy = params.mode == GREEDY
        sp = SamplingParams(max_tokens=task.max_new_tokens, stop=list(task.stop), seed=params.seed,
                            temperature=0.0 if greedy else SAMPLED_TEMPERATURE,
                            top_p=1.0 if greedy else SAMPLED_TOP_P)
        engine = self.llm.engine
        kv = 0

        def on_update(u) -> None:   # the cache is released when the sequence finishes: read it before
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
            suite="main", system=self.info.name, task_set=task.task_set, task_id=task.task_id, mode=params.mode,
            repeat=params.repeat, prompt_tokens=s["prompt_tokens"], generated_tokens=s["generated_tokens"],
            wall_s=round(wall, 6), ttft_s=s["ttft_s"], decode_s=s["decode_s"], decode_tokens_per_s=s["tokens_per_s"],
            forward_passes=s["decode_steps"] + 1, mean_accepted_tokens_per_step=s["mean_accepted_tokens_per_step"],
            acceptance_rate=s["acceptance_rate"], accepted_hist=s["accepted_tokens_per_step_histogram"],
            draft_s=s["draft_s"], peak_rss_delta_bytes=mem.delta, kv_cache_bytes=kv or None,
            finish_reason=seq.finish_reason, token_ids=list(seq.output))

    def close(self) -> None:
        self._drafter = self._snapshot = self._after_first = None


# ------------------------------------------------------------------------------------------ peers

class _PeerBase:
    """Peers keep no memory across requests: the set/task hooks do nothing."""
    info: SystemInfo

    def begin_set(self, task_set: str) -> None: ...
    def begin_task(self) -> None: ...
    def end_task(self) -> None: ...

    def _measure(self, task: BenchTask, params: RunParams, tokens: list[int], t_first: float, total: float,
                 forwards: int | None, mem: PeakRSS, kv: int | None) -> Measurement:
        n = len(tokens)
        decode = max(total - t_first, 0.0)
        return Measurement(
            suite="main", system=self.info.name, task_set=task.task_set, task_id=task.task_id, mode=params.mode,
            repeat=params.repeat, prompt_tokens=len(task.prompt_ids), generated_tokens=n, wall_s=round(total, 6),
            ttft_s=round(t_first, 6), decode_s=round(decode, 6),
            decode_tokens_per_s=round((n - 1) / decode, 3) if n > 1 and decode > 0 else 0.0,
            forward_passes=forwards, mean_accepted_tokens_per_step=None, acceptance_rate=None, accepted_hist=None,
            draft_s=None, peak_rss_delta_bytes=mem.delta, kv_cache_bytes=kv, finish_reason=None, token_ids=tokens)


class HFModelCache:
    """One transformers model for both transformers systems, loaded on first use."""

    def __init__(self, model: str, dtype: str):
        self.model_name, self.dtype, self._model = model, dtype, None

    def get(self):
        if self._model is None:
            import torch
            import transformers

            from ..model.loader import resolve_model_path
            path = resolve_model_path(self.model_name)
            dtype = getattr(torch, self.dtype)
            auto = transformers.AutoModelForCausalLM
            if path.suffix == ".gguf":   # the same GGUF file, read by transformers
                m = auto.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
            else:
                m = auto.from_pretrained(path, dtype=dtype)
            self._model = m.eval()
        return self._model


class TransformersSystem(_PeerBase):
    """transformers `generate`, plain or with prompt lookup decoding. Decode tokens/s =
    (n - 1) / (time of the n-token call - time of a 1-token call on the same prompt)."""

    def __init__(self, name: str, models: HFModelCache, eos_token_ids: set[int], prompt_lookup: int | None):
        try:
            import transformers
        except ImportError as e:
            raise SkipSystem(f"transformers is not importable ({e})") from None
        what = f"prompt_lookup_num_tokens={prompt_lookup}" if prompt_lookup else "plain"
        self.info = SystemInfo(name, "peer", f"transformers {transformers.__version__} generate, {what}")
        self.models, self.eos, self.prompt_lookup = models, sorted(eos_token_ids), prompt_lookup
        self._forwards = 0

    def prepare(self) -> None:
        try:
            model = self.models.get()
        except Exception as e:   # e.g. an architecture transformers cannot read from GGUF
            raise SkipSystem(f"transformers cannot load the model: {type(e).__name__}: {e}") from None
        model.register_forward_hook(self._count_forward)

    def _count_forward(self, *_) -> None:   # prompt lookup verifies a whole draft in one forward
        self._forwards += 1

    def _generate(self, x, n: int, params: RunParams):
        import torch

        kw: dict[str, Any] = dict(max_new_tokens=n, eos_token_id=self.eos, pad_token_id=self.eos[0],
                                  attention_mask=torch.ones_like(x))
        if params.mode == GREEDY:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            torch.manual_seed(params.seed)
            kw.update(do_sample=True, temperature=SAMPLED_TEMPERATURE, top_p=SAMPLED_TOP_P, top_k=0)
        if self.prompt_lookup and n > 1:
            kw["prompt_lookup_num_tokens"] = self.prompt_lookup
        with torch.inference_mode():
            return self.models.get().generate(x, **kw)

    def run(self, task: BenchTask, params: RunParams) -> Measurement:
        import torch

        n = params.target_tokens or task.max_new_tokens
        x = torch.tensor([task.prompt_ids])
        model = self.models.get()
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            self._generate(x, 1, params)
            t_first = time.perf_counter() - t0
            self._forwards = 0
            t0 = time.perf_counter()
            out = self._generate(x, n, params)
            total = time.perf_counter() - t0
        tokens = out[0, x.shape[1]:].tolist()
        cfg = model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        # DynamicCache holds K and V of every position, in the model dtype
        kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * (x.shape[1] + len(tokens)) \
            * model.dtype.itemsize
        return self._measure(task, params, tokens, t_first, total, self._forwards, mem, kv)

    def close(self) -> None: ...


class LlamaCppSystem(_PeerBase):
    """llama.cpp through llama-cpp-python on the same GGUF: plain, or with its prompt-lookup draft
    model (LlamaPromptLookupDecoding). Greedy is temp=0; its forward passes are not counted."""

    def __init__(self, name: str, model: str, threads: int, prompt_lookup: int | None):
        try:
            import llama_cpp
        except ImportError:
            raise SkipSystem("llama-cpp-python is not installed (`make peers` installs it)") from None
        from ..model.loader import resolve_model_path
        self.path = resolve_model_path(model)
        if self.path.suffix != ".gguf":
            raise SkipSystem(f"llama.cpp needs a .gguf model, got {self.path}")
        what = f"prompt lookup ({prompt_lookup} tokens)" if prompt_lookup else "plain"
        self.info = SystemInfo(name, "peer", f"llama-cpp-python {llama_cpp.__version__}, {what}")
        self.threads, self.prompt_lookup, self.llm = threads, prompt_lookup, None

    def prepare(self) -> None:
        from llama_cpp import Llama
        draft = None
        try:
            if self.prompt_lookup:
                from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
                draft = LlamaPromptLookupDecoding(num_pred_tokens=self.prompt_lookup)
            self.llm = Llama(model_path=str(self.path), n_ctx=4096, n_threads=self.threads,
                             n_threads_batch=self.threads, draft_model=draft, verbose=False)
        except Exception as e:  # noqa: BLE001  (e.g. an old release without draft models)
            raise SkipSystem(f"llama-cpp-python cannot run the model: {type(e).__name__}: {e}") from None

    def _generate(self, ids: list[int], n: int, params: RunParams, on_first: Callable[[], None]) -> list[int]:
        greedy = params.mode == GREEDY
        if not greedy:
            self.llm.set_seed(params.seed)
        out: list[int] = []
        eos = self.llm.token_eos()
        self.llm.reset()   # else generate() reuses the KV of a previous call's matching prefix: no prefill
        for tok in self.llm.generate(ids, temp=0.0 if greedy else SAMPLED_TEMPERATURE,
                                     top_p=1.0 if greedy else SAMPLED_TOP_P, top_k=0 if not greedy else 1,
                                     min_p=0.0, repeat_penalty=1.0, reset=True):
            if not out:
                on_first()
            out.append(int(tok))
            if tok == eos or len(out) >= n:
                break
        return out

    def run(self, task: BenchTask, params: RunParams) -> Measurement:
        n = params.target_tokens or task.max_new_tokens
        first: list[float] = []
        with PeakRSS() as mem:
            t0 = time.perf_counter()
            tokens = self._generate(task.prompt_ids, n, params, lambda: first.append(time.perf_counter() - t0))
            total = time.perf_counter() - t0
        # the generator yields the first token as soon as the prompt is evaluated: that is its TTFT
        return self._measure(task, params, tokens, first[0] if first else total, total, None, mem, None)

    def close(self) -> None:
        if self.llm is not None and hasattr(self.llm, "close"):   # (older releases free on __del__)
            self.llm.close()
        self.llm = None


# ---------------------------------------------------------------------------------------- factory

@dataclass
class SystemContext:
    llm: Any                      # paraspec.LLM shared by every paraspec system
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
    if name == "aspd":
        raise SkipSystem("ASPD (paraspec.aspd) does not exist yet")
    if name in ("hf", "hf-pld"):
        if ctx.hf_models is None:
            ctx.hf_models = HFModelCache(ctx.model, ctx.dtype)
        return TransformersSystem(name, ctx.hf_models, set(ctx.llm.tokenizer.eos_token_ids),
                                  PLD_TOKENS if name == "hf-pld" else None)
    if name in ("llamacpp", "llamacpp-pld"):
        return LlamaCppSystem(name, ctx.model, ctx.threads, PLD_TOKENS if name == "llamacpp-pld" else None)
    raise ConfigError(f"unknown bench system {name!r}; choose from {', '.join(ALL_SYSTEMS)}, "
                      "md-tree-L<n>, md-chain-L<n> or la-N<n>W<w>G<g>")


def is_known(name: str) -> bool:
    return name in ALL_SYSTEMS or sweep_plugin(name) is not None


def describe_skipped(name: str, reason: str) -> SystemInfo:
    kind = "paraspec" if name in PARASPEC_SYSTEMS or name == "aspd" or sweep_plugin(name) else "peer"
    return SystemInfo(name, kind, name, PARASPEC_SYSTEMS.get(name), status="skipped", note=reason)

