"""The engine's configuration as resolved by LLM() (api.py) from its checked EngineArgs
(engine_args.py: each option's default, range and check, declared once), and the MindIE-style
`plugin_params` that choose parallel decoding.

plugin_params is a JSON string (or dict), as in MindIE's ModelConfig:
    {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": true}
    {"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}     ("lookahead" works too)
    {"plugin_type": "hybrid", ...}                                           (both drafters, one budget)
    {"plugin_type": "aspd", "drafter": {...}}      (serial-parallel decoding, aspd/params.py)
Each algorithm's own parameters are validated by its params class, with speculation_gamma
(decoding/drafters/plugins.py: parse_plugin_params and the plugin table).
"""

from __future__ import annotations

from dataclasses import dataclass

from .decoding.drafters.plugins import PLUGIN_ALIASES, PluginConfig  # noqa: F401  (re-exported)
from .engine_args import DEFAULTS, EngineArgs, parse_plugin_params  # noqa: F401  (re-exported)

# KV of whole prompt chunks kept for reuse; 0: off
DEFAULT_PREFIX_CACHE_MB = DEFAULTS.prefix_cache_mb
DEFAULT_PREFILL_CHUNK = DEFAULTS.prefill_chunk


@dataclass
class EngineConfig:
    """What an LLM runs with: its EngineArgs checked, "auto" numerics resolved for this CPU and model."""

    dtype: str
    quantization: str | None
    max_batch_size: int
    speculation_gamma: int | None  # MindIE speculationGamma: max draft tokens per step
    plugin: PluginConfig | None
    prefill_chunk: int  # prompt tokens per prefill forward (see scheduler.py)
    kv_cache_dtype: str  # the KV cache's elements (model/kv_cache.py)
    activation_passes: int | str  # int8 activation passes; "auto": model/kernels.py picks
