"""The server's config.json, in MindIE Service's layout, as typed dataclasses (one per section).

    {"Version": "1.0.0",
     "LogConfig":    {"logLevel": "Info"},
     "ServerConfig": {"ipAddress": "127.0.0.1", "port": 1025, "maxLinkNum": 1000, "tokenTimeout": 600, ...},
     "BackendConfig": {
        "ModelDeployConfig": {"maxSeqLen": 2560, "maxInputTokenLen": 2048, "truncation": false, "speculationGamma": 16,
                              "ModelConfig": [{"modelName": "...", "modelWeightPath": "default",
                                               "plugin_params": "{\\"plugin_type\\":\\"memory_decoding\\"}"}]},
        "ScheduleConfig": {"maxBatchSize": 8, "maxIterTimes": 512, ...}}}

Each field's docstring names its key and range. config_loader.py reads a file into these (and
config_model.py checks the one ModelConfig entry); `ServiceConfigError` carries every problem found.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from ..config import PluginConfig
from ..engine_args import DEFAULTS, EngineArgs
from ..errors import ConfigError

DEFAULT_PLUGIN_PARAMS = '{"plugin_type": "memory_decoding"}'


class ServiceConfigError(ConfigError):
    """One or more problems in config.json; `problems` lists them, the message joins them on one line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


# ------------------------------------------------------------------------------------ sections


@dataclass
class ServerConfig:
    ip_address: str = "127.0.0.1"
    """ipAddress: the address the HTTP API binds to. 0.0.0.0 needs allowAllZeroIpListening (MindIE's rule)."""
    port: int = 1025
    """port: [1024, 65535]."""
    allow_all_zero_ip_listening: bool = False
    """allowAllZeroIpListening: permit ipAddress 0.0.0.0 / ::."""
    max_link_num: int = 1000
    """maxLinkNum: most requests held at once (running + queued); more are refused with HTTP 503."""
    token_timeout: float = 600.0
    """tokenTimeout: seconds a request may wait for its next tokens before it is cancelled (HTTP 504)."""
    e2e_timeout: float = 600.0
    """e2eTimeout: seconds a whole request may take before it is cancelled (HTTP 504)."""
    api_key: str | None = None
    """apiKey: clients must send `Authorization: Bearer <apiKey>` on /v1/* and /metrics (None: no key).
    --api-key and $PARASPEC_API_KEY override it."""
    allowed_hosts: list[str] | None = None
    """allowedHosts: Host header names the server answers to ("*": any); default the bind address,
    localhost, 127.0.0.1 and ::1 (any when bound to 0.0.0.0)."""
    metrics_open: bool = False
    """metricsOpen: serve /metrics without the API key (for a scraper without secrets)."""
    body_timeout: float = 60.0
    """bodyTimeout (paraspec's own): seconds a request body may take to arrive; slower is HTTP 408, closed."""
    shutdown_grace: float = 30.0
    """shutdownGrace (paraspec's own): seconds requests get to finish after SIGTERM; the rest are cut."""


@dataclass
class ModelConfig:
    model_name: str | None = None
    """modelName: the name clients pass as `model`; None = the model's own name."""
    model_weight_path: str = "default"
    """modelWeightPath: a .gguf file, a Hugging Face folder, "default" (the bundled model) or a fetched name."""
    plugin_params: str | dict | None = None
    """plugin_params: MindIE's JSON string choosing parallel decoding; absent = plain decoding."""
    plugin: PluginConfig | None = None
    """plugin_params parsed and validated (None = plain decoding)."""


@dataclass
class ModelDeployConfig:
    max_seq_len: int = 2560
    """maxSeqLen: prompt + output tokens of one request (capped by the model's own context)."""
    max_input_token_len: int = 2048
    """maxInputTokenLen: longest prompt in tokens; [1, maxSeqLen - 1]."""
    truncation: bool = False
    """truncation: keep the last maxInputTokenLen tokens of a longer prompt instead of refusing it."""
    speculation_gamma: int | None = None
    """speculationGamma: most tokens one request may verify per step; checked against plugin_params."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """ModelConfig: exactly one entry; paraspec serves one model per process."""


@dataclass
class ScheduleConfig:
    max_batch_size: int = DEFAULTS.max_batch_size
    """maxBatchSize: sequences decoded together in one forward; the rest wait in the queue. [1, 256]"""
    max_iter_times: int = 512
    """maxIterTimes: most tokens one request may generate (its max_tokens is capped here)."""
    prefill_chunk_size: int = DEFAULTS.prefill_chunk
    """prefillChunkSize: prompt tokens per prefill forward; a long prompt's chunks take turns with the
    running requests' decode steps, so their streams never stall for a whole prefill. [16, 8192]"""
    prefix_cache_mb: float = DEFAULTS.prefix_cache_mb
    """prefixCacheMB (paraspec's own key): memory for the KV of whole prompt chunks prefilled before,
    reused bit for bit by later prompts that start with them (system prompts, earlier turns); least
    recently used first out. 0 turns it off. --prefix-cache-mb overrides it. [0, 1048576]"""


@dataclass
class ServiceConfig:
    server: ServerConfig = field(default_factory=ServerConfig)
    model_deploy: ModelDeployConfig = field(default_factory=ModelDeployConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    log_level: int = logging.INFO
    warnings: list[str] = field(default_factory=list)
    """Unknown keys and fallbacks: not fatal, logged at startup."""
    source: str | None = None
    """The file this came from; None = built-in defaults."""

    @property
    def plugin(self) -> PluginConfig | None:
        return self.model_deploy.model.plugin

    def engine_args(self, base: EngineArgs = DEFAULTS) -> EngineArgs:
        """The engine this config describes, over `base` (the command line's model options)."""
        deploy, schedule = self.model_deploy, self.schedule
        return replace(
            base,
            model=deploy.model.model_weight_path,
            plugin_params=self.plugin,
            speculation_gamma=deploy.speculation_gamma,
            max_batch_size=schedule.max_batch_size,
            prefill_chunk=schedule.prefill_chunk_size,
            prefix_cache_mb=schedule.prefix_cache_mb,
        )
