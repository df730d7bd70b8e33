"""Typed engine configuration and the MindIE-style `plugin_params` that choose parallel decoding.

plugin_params is a JSON string (or dict), as in MindIE's ModelConfig:
    {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": true}
    {"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}     ("lookahead" works too)
    {"plugin_type": "hybrid", ...}                                           (both drafters, one budget)
    {"plugin_type": "aspd", "drafter": {...}}      (serial-parallel decoding, aspd/params.py)
Each algorithm's own parameters are validated by its params class, with speculation_gamma
(decoding/plugins.py: parse_plugin_params and the registered plugin types).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import aspd
from .decoding.plugins import PluginConfig, parse_plugin_params, register_plugin  # noqa: F401  (re-exported)
from .errors import ConfigError

# ASPD decodes on top of the drafters, so the decoding layer cannot name it; it joins their table here
register_plugin("aspd", aspd.PLUGIN)

QUANTIZATIONS = ("w8a8", "gguf")
KV_CACHE_DTYPES = ("fp32", "fp16")
DEFAULT_PREFIX_CACHE_MB = 256    # KV of whole prompt chunks kept for reuse (prefix_cache.py); 0: off
DEFAULT_PREFILL_CHUNK = 256      # ~1/8 of a 2k prompt's prefill between two decode steps


@dataclass
class EngineConfig:
    dtype: str = "bfloat16"
    quantization: str | None = None
    max_batch_size: int = 8
    speculation_gamma: int | None = None   # MindIE speculationGamma: max draft tokens per step
    plugin: PluginConfig | None = None
    prefill_chunk: int = DEFAULT_PREFILL_CHUNK   # prompt tokens per prefill forward (see scheduler.py)
    kv_cache_dtype: str = "fp32"                 # the KV cache's elements (model/kv_cache.py)
    activation_passes: int | str = "auto"        # int8 activation passes (model/kernels.py)

    def __post_init__(self) -> None:
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"quantization={self.quantization!r} is not supported; use 'w8a8', 'gguf' "
                              "(a .gguf file's own blocks), 'none' or 'auto' "
                              "(chosen for this CPU)")
        if not isinstance(self.max_batch_size, int) or not 1 <= self.max_batch_size <= 256:
            raise ConfigError(f"max_batch_size={self.max_batch_size!r} is invalid; use an integer from 1 to 256")
        if isinstance(self.prefill_chunk, bool) or not isinstance(self.prefill_chunk, int) or \
                not 16 <= self.prefill_chunk <= 8192:
            raise ConfigError(f"prefill_chunk={self.prefill_chunk!r} is invalid; use an integer from 16 to 8192",
                              param="prefill_chunk")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(f"kv_cache_dtype={self.kv_cache_dtype!r} is not supported; use 'fp32' (default) or "
                              "'fp16' (half the cache's memory and bytes read per step)", param="kv_cache_dtype")
        if self.activation_passes not in ("auto", 1, 2, "1", "2") or isinstance(self.activation_passes, bool):
            raise ConfigError(f"activation_passes={self.activation_passes!r} is invalid; use 'auto' (default), 1 "
                              "(llama.cpp's Q8 activations) or 2 (plus the rounding residual)", param="activation_passes")
