"""Peers in `paraspec bench`: transformers `generate` and llama-cpp-python, plain and with prompt
lookup. They generate the token count paraspec AR produced for the same run (params.target_tokens),
stopping earlier only at EOS, so decode tokens/s are over the same work.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any, Callable

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

PEER_SYSTEMS = ("hf", "hf-pld", "llamacpp", "llamacpp-pld")
PLD_TOKENS = 10  # prompt-lookup draft length of both peers (transformers' documented example value)


class _PeerBase:
    """Peers keep no memory across requests: the set/task hooks do nothing."""

    info: SystemInfo

    def begin_set(self, task_set: str) -> None: ...
    def begin_task(self) -> None: ...
    def end_task(self) -> None: ...

    def _measure(
        self,
        task: BenchTask,
        params: RunParams,
        tokens: list[int],
        t_first: float,
        total: float,
        forwards: int | None,
        mem: PeakRSS,
        kv: int | None,
    ) -> Measurement:
        n = len(tokens)
        decode = total - t_first
        if n > 1 and decode <= 0:
            # t_first comes from a separate 1-token call: on a loaded machine (a tiny model's whole
            # run takes milliseconds) it can outlast the full run. The run's mean time per token
            # then stands in for the decode, rather than a rate of 0 or infinity.
            decode = total * (n - 1) / n
        return Measurement(
            suite="main",
            system=self.info.name,
            task_set=task.task_set,
            task_id=task.task_id,
            mode=params.mode,
            repeat=params.repeat,
            prompt_tokens=len(task.prompt_ids),
            generated_tokens=n,
            wall_s=round(total, 6),
            ttft_s=round(t_first, 6),
            decode_s=round(decode, 6),
            decode_tokens_per_s=round((n - 1) / decode, 3) if n > 1 and decode > 0 else 0.0,
            forward_passes=forwards,
            mean_accepted_tokens_per_step=None,
            acceptance_rate=None,
            accepted_hist=None,
            draft_s=None,
            peak_rss_delta_bytes=mem.delta,
            kv_cache_bytes=kv,
            finish_reason=None,
            token_ids=tokens,
        )


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
            if path.suffix == ".gguf":  # the same GGUF file, read by transformers
                m = auto.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
            else:
                m = auto.from_pretrained(path, dtype=dtype)
            self._model = m.eval()
        return self._model


class TransformersSystem(_PeerBase):
    """transformers `generate`, plain or with prompt lookup decoding. Decode tokens/s =
    (n - 1) / (time of the n-token call - time of a 1-token call on the same prompt)."""

    def __init__(
        self, name: str, models: HFModelCache, eos_token_ids: set[int], prompt_lookup: int | None
    ):
        import transformers

        what = f"prompt_lookup_num_tokens={prompt_lookup}" if prompt_lookup else "plain"
        self.info = SystemInfo(
            name, "peer", f"transformers {transformers.__version__} generate, {what}"
        )
        self.models, self.eos, self.prompt_lookup = models, sorted(eos_token_ids), prompt_lookup
        self._forwards = 0

    def prepare(self) -> None:
        try:
            model = self.models.get()
        except Exception as e:  # e.g. an architecture transformers cannot read from GGUF
            raise SkipSystem(
                f"transformers cannot load the model: {type(e).__name__}: {e}"
            ) from None
        model.register_forward_hook(self._count_forward)

    def _count_forward(self, *_) -> None:  # prompt lookup verifies a whole draft in one forward
        self._forwards += 1

    def _generate(self, x, n: int, params: RunParams):
        import torch

        kw: dict[str, Any] = dict(
            max_new_tokens=n,
            eos_token_id=self.eos,
            pad_token_id=self.eos[0],
            attention_mask=torch.ones_like(x),
        )
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
        tokens = out[0, x.shape[1] :].tolist()
        cfg = model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        # DynamicCache holds K and V of every position, in the model dtype
        kv = (
            2
            * cfg.num_hidden_layers
            * cfg.num_key_value_heads
            * head_dim
            * (x.shape[1] + len(tokens))
            * model.dtype.itemsize
        )
        return self._measure(task, params, tokens, t_first, total, self._forwards, mem, kv)

    def close(self) -> None: ...


# llama-cpp-python compiles llama.cpp for the CPU it was installed on (GGML_NATIVE): moved to a
# CPU without those instructions its forward dies with SIGILL, and so did a native build on a VM
# whose CPUID lists AMX (ggml's AMX matmul; docs/design-notes.md, figures), which takes
# the whole bench with it. So a child process decodes a short prompt first (several tokens: a
# one-token prompt does not reach the batched matmuls).
LLAMACPP_PROBE = (
    "import sys; from llama_cpp import Llama; "
    "Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)('Hi there. ' * 16, max_tokens=2)"
)


def llamacpp_probe(path: str) -> str | None:
    """Why llama-cpp-python cannot decode `path` on this CPU, or None when it can."""
    r = subprocess.run(
        [sys.executable, "-c", LLAMACPP_PROBE, path], capture_output=True, text=True, timeout=600
    )
    if r.returncode < 0:
        name = signal.Signals(-r.returncode).name
        return (
            f"llama-cpp-python died on this CPU ({name}): its build uses instructions this CPU "
            "does not run; rebuild it here with `make peers` (on a VM with AMX in CPUID, with "
            "CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AMX_INT8=OFF')"
        )
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        return f"llama-cpp-python cannot run the model: {last}"
    return None


class LlamaCppSystem(_PeerBase):
    """llama.cpp through llama-cpp-python on the same GGUF: plain, or with its prompt-lookup draft
    model (LlamaPromptLookupDecoding). Greedy is temp=0; its forward passes are not counted."""

    def __init__(self, name: str, model: str, threads: int, prompt_lookup: int | None):
        try:
            import llama_cpp
        except ImportError:
            raise SkipSystem(
                "llama-cpp-python is not installed (`make peers` installs it)"
            ) from None
        from ..model.loader import resolve_model_path

        self.path = resolve_model_path(model)
        if self.path.suffix != ".gguf":
            raise SkipSystem(f"llama.cpp needs a .gguf model, got {self.path}")
        reason = llamacpp_probe(str(self.path))
        if reason:
            raise SkipSystem(reason)
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
            self.llm = Llama(
                model_path=str(self.path),
                n_ctx=4096,
                n_threads=self.threads,
                n_threads_batch=self.threads,
                draft_model=draft,
                verbose=False,
            )
        except Exception as e:  # noqa: BLE001  (e.g. an old release without draft models)
            raise SkipSystem(
                f"llama-cpp-python cannot run the model: {type(e).__name__}: {e}"
            ) from None

    def _generate(
        self, ids: list[int], n: int, params: RunParams, on_first: Callable[[], None]
    ) -> list[int]:
        greedy = params.mode == GREEDY
        if not greedy:
            self.llm.set_seed(params.seed)
        out: list[int] = []
        eos = self.llm.token_eos()
        self.llm.reset()  # else generate() reuses the KV of a previous call's matching prefix: no prefill
        for tok in self.llm.generate(
            ids,
            temp=0.0 if greedy else SAMPLED_TEMPERATURE,
            top_p=1.0 if greedy else SAMPLED_TOP_P,
            top_k=0 if not greedy else 1,
            min_p=0.0,
            repeat_penalty=1.0,
            reset=True,
        ):
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
            tokens = self._generate(
                task.prompt_ids, n, params, lambda: first.append(time.perf_counter() - t0)
            )
            total = time.perf_counter() - t0
        # the generator yields the first token as soon as the prompt is evaluated: that is its TTFT
        return self._measure(
            task, params, tokens, first[0] if first else total, total, None, mem, None
        )

    def close(self) -> None:
        if self.llm is not None and hasattr(self.llm, "close"):  # (older releases free on __del__)
            self.llm.close()
        self.llm = None
