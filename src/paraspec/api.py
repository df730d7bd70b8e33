"""The Python API, in the shape vLLM users know: LLM, SamplingParams, RequestOutput."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence as Seq

import torch

from .config import EngineConfig, parse_plugin_params
from .decoding.memory.memory_file import merge_memory_file, save_memory_file
from .sequence import sequence_stats
from .engine import DRAFT_GATE_ENV, Engine
from .outputs import TokenLogprob
from .engine_args import DEFAULTS, EngineArgs, describe
from .prefix_cache import PrefixCache
from .errors import ConfigError, RequestError
from .model import kernels as cpu_kernels
from .model.ggml import GGUFWeight
from .model.kv_cache import KV_DTYPES
from .model.loader import is_gguf, load_model
from .model.tokenizer import Tokenizer
from .model.transformer import Transformer
from .runner import COST_ENV, ModelRunner, parse_pinned_curve
from .sampling.params import SamplingParams

DTYPES = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float32": torch.float32,
    "fp32": torch.float32,
}


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None = None
    stats: dict = field(default_factory=dict)


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]

    # the first sample's fields, for the common n == 1 case
    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    @property
    def stats(self) -> dict:
        return self.outputs[0].stats


class LLM:
    """An engine over one model. Its options (below) are EngineArgs' (engine_args.py), where each
    one's default, allowed values and check are declared once; `LLM.from_engine_args(args)` takes
    them whole.

    dtype / quantization "auto" (the defaults) pick the fastest exact numerics for this CPU: a GGUF
    file runs its own blocks where a compiled kernel runs, else kernels.default_numerics (w8a8 where
    a compiled W8A8 kernel runs, else bf16); an explicit dtype keeps its meaning (a GGUF file
    dequantised), and quantization "w8a8" / "gguf" / "none" forces one or disables it.

    """

    def __init__(
        self,
        model: str | None = DEFAULTS.model,
        dtype: str = DEFAULTS.dtype,
        plugin_params: str | dict | None = None,
        quantization: str | None = DEFAULTS.quantization,
        max_batch_size: int = DEFAULTS.max_batch_size,
        speculation_gamma: int | None = None,
        num_threads: int | None = None,
        kernels: str | None = None,
        prefill_chunk: int = DEFAULTS.prefill_chunk,
        kv_cache_dtype: str = DEFAULTS.kv_cache_dtype,
        activation_passes: int | str = DEFAULTS.activation_passes,
        prefix_cache_mb: float = DEFAULTS.prefix_cache_mb,
    ):
        self._load(
            EngineArgs(
                model=model,
                dtype=dtype,
                plugin_params=plugin_params,
                quantization=quantization,
                max_batch_size=max_batch_size,
                speculation_gamma=speculation_gamma,
                num_threads=num_threads,
                kernels=kernels,
                prefill_chunk=prefill_chunk,
                kv_cache_dtype=kv_cache_dtype,
                activation_passes=activation_passes,
                prefix_cache_mb=prefix_cache_mb,
            ).check()
        )

    @classmethod
    def from_engine_args(cls, args: EngineArgs) -> "LLM":
        llm = cls.__new__(cls)
        llm._load(args.check())
        return llm

    def _load(self, args: EngineArgs) -> None:
        prefix_cache = PrefixCache(args.prefix_cache_mb)
        self.kernels = (
            cpu_kernels.default() if args.kernels is None else cpu_kernels.choose(args.kernels)
        )
        auto = args.dtype == "auto" and args.quantization in ("auto", None)
        self.numerics = cpu_kernels.resolve_numerics(
            args.dtype, args.quantization, self.kernels, gguf_file=is_gguf(args.model)
        )
        dtype, quantization = self.numerics.dtype, self.numerics.quantization
        self.config = EngineConfig(
            dtype=dtype,
            quantization=quantization,
            max_batch_size=args.max_batch_size,
            speculation_gamma=args.speculation_gamma,
            plugin=args.plugin,
            prefill_chunk=args.prefill_chunk,
            kv_cache_dtype=args.kv_cache_dtype,
            activation_passes=args.activation_passes,
        )
        if args.num_threads is not None:
            torch.set_num_threads(args.num_threads)
        # w8a8 quantises from fp32 weights; the rest of the model stays in `dtype`
        loaded = load_model(
            args.model,
            torch.float32 if quantization else DTYPES[dtype],
            keep_quantized=quantization == "gguf",
        )
        if quantization == "gguf" and not any(
            isinstance(w, GGUFWeight) for w in loaded.weights.values()
        ):
            if not auto:
                raise ConfigError(
                    f"quantization='gguf': {loaded.path.name} has no Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/"
                    "Q6_K weights to run as stored; use 'w8a8', 'none' or 'auto'"
                )
            # e.g. an F16 or K-quant file
            self.numerics = cpu_kernels.default_numerics(self.kernels)
            dtype, quantization = self.numerics.dtype, self.numerics.quantization
            self.config.dtype, self.config.quantization = dtype, quantization
        self.model_name = loaded.name
        self.tokenizer = Tokenizer.from_source(loaded.tokenizer_source)
        self.model = Transformer(
            loaded.args,
            loaded.weights,
            DTYPES[dtype],
            quantization=quantization,
            kernels=self.kernels,
            kv_dtype=KV_DTYPES[self.config.kv_cache_dtype],
            activation_passes=self.config.activation_passes,
        )
        self.runner = ModelRunner(self.model, self.config.prefill_chunk)
        gate = (
            args.draft_gate
            if args.draft_gate is not None
            else os.environ.get(DRAFT_GATE_ENV, "1") != "0"
        )
        self.engine = Engine(
            self.runner,
            self.tokenizer,
            self.config.max_batch_size,
            prefix_cache=prefix_cache,
            draft_gate=gate,
            model_name=loaded.name,
        )
        self.drafter = self.engine.drafters.drafter(self.config.plugin)
        if self.config.plugin is not None:
            self.config.plugin.check_tokenizer(self.tokenizer)
        self.engine.default_drafter = self.drafter
        if self.drafter is not None:
            self.engine.cost  # measured now, not inside the first request
        elif os.environ.get(COST_ENV, "").strip():
            # a bad pin fails here, not a later request's drafts
            parse_pinned_curve(os.environ[COST_ENV])

    # ------------------------------------------------------------------------------ memory

    def save_memory(self, path: str) -> None:
        """Save the engine's drafting memory so it survives a restart: the trie's output counts
        (memory_decoding, hybrid) and the hybrid's past outputs, in one file (memory_file.py)."""
        d = self.engine.drafters
        save_memory_file(
            path,
            d.trie(),
            d.output_memory() if d.has_output_memory else None,
            self.model.args.vocab_size,
        )

    def load_memory(self, path: str) -> None:
        """Merge a memory saved by save_memory (or an older trie-only file) into this engine's
        memory; a file that cannot be used (one from a model with another vocabulary included)
        raises MemoryFileError and changes nothing."""
        d = self.engine.drafters
        merge_memory_file(path, d.trie(), d.output_memory(), self.model.args.vocab_size)

    # --------------------------------------------------------------------------------------

    def generate(
        self,
        prompts: str | list[int] | Seq[str | list[int]],
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        plugin_params: str | dict | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text, or a list of token ids). Requests run batched."""
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        items = [(p if isinstance(p, str) else None, self._encode(p)) for p in prompts]
        return self._run(items, sampling_params, plugin_params)

    def chat(
        self,
        messages: list[dict] | Seq[list[dict]],
        sampling_params: SamplingParams | None = None,
        plugin_params: str | dict | None = None,
    ) -> list[RequestOutput]:
        """Chat with the model's own template. `messages` is one conversation or a list of them."""
        convs = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        items = []
        for conv in convs:
            items.append(
                (self.tokenizer.apply_chat_template(conv), self.tokenizer.encode_chat(conv))
            )
        return self._run(items, sampling_params, plugin_params)

    def _drafter_for(self, plugin_params: str | dict):
        """The engine's drafter for that plugin config, kept across calls: its measured
        acceptance (and, for memory_decoding, the shared trie) carries over as in a server."""
        return self.engine.drafters.drafter(
            parse_plugin_params(plugin_params, self.config.speculation_gamma)
        )

    def _encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            raise RequestError("a prompt must be a string or a list of token ids")
        return list(prompt)

    def _run(self, items, sampling_params, plugin_params) -> list[RequestOutput]:
        if sampling_params is None:
            sampling_params = SamplingParams()
        params_list = (
            sampling_params
            if isinstance(sampling_params, (list, tuple))
            else [sampling_params] * len(items)
        )
        if len(params_list) != len(items):
            raise RequestError("pass one SamplingParams, or one per prompt")
        drafter = "default" if plugin_params is None else self._drafter_for(plugin_params)
        requests = []
        for (text, ids), params in zip(items, params_list):
            seqs = self.engine.add_request(ids, params, drafter=drafter)
            requests.append((text, ids, seqs))
        self.engine.run_until_done()
        out = []
        for text, ids, seqs in requests:
            outputs = [
                CompletionOutput(
                    s.index, s.text, list(s.output), s.finish_reason, s.logprobs, sequence_stats(s)
                )
                for s in seqs
            ]
            out.append(RequestOutput(seqs[0].request_id, text, ids, outputs))
        return out


if LLM.__doc__ is not None:  # (python -OO drops docstrings)
    LLM.__doc__ += describe() + "\n"
