"""The server's config.json, in MindIE Service's layout, read into typed dataclasses and validated once.

    {"Version": "1.0.0",
     "LogConfig":    {"logLevel": "Info"},
     "ServerConfig": {"ipAddress": "127.0.0.1", "port": 1025, "maxLinkNum": 1000, "tokenTimeout": 600, ...},
     "BackendConfig": {
        "ModelDeployConfig": {"maxSeqLen": 2560, "maxInputTokenLen": 2048, "truncation": false, "speculationGamma": 16,
                              "ModelConfig": [{"modelName": "...", "modelWeightPath": "default",
                                               "plugin_params": "{\\"plugin_type\\":\\"memory_decoding\\"}"}]},
        "ScheduleConfig": {"maxBatchSize": 8, "maxIterTimes": 512, ...}}}

A MindIE user's file carries over: the MindIE keys paraspec has no use for (mindie_keys.py: TLS, NPU ids,
...) are accepted silently, keys nobody knows are reported as warnings (with a "did you mean"), and
every invalid value is one problem naming the field and the allowed range. All problems are
collected, so one run shows every fix needed; `ServiceConfigError` carries them.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import catalog
from ..config import PluginConfig, parse_plugin_params
from ..engine_args import DEFAULTS, EngineArgs, spec
from ..errors import ConfigError
from . import mindie_keys
from .json_reader import Section

MAX_CONFIG_BYTES = 10 * 1024 * 1024       # MindIE reads files of (0, 10 MB]
DEFAULT_PLUGIN_PARAMS = '{"plugin_type": "memory_decoding"}'
LOG_LEVELS = {"verbose": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
              "warning": logging.WARNING, "warn": logging.WARNING, "error": logging.ERROR,
              "critical": logging.CRITICAL}

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
        return replace(base, model=deploy.model.model_weight_path, plugin_params=self.plugin,
                       speculation_gamma=deploy.speculation_gamma, max_batch_size=schedule.max_batch_size,
                       prefill_chunk=schedule.prefill_chunk_size, prefix_cache_mb=schedule.prefix_cache_mb)


# ------------------------------------------------------------------------------------ loading

def load_config(path: str | os.PathLike | None = None, *, host: str | None = None, port: int | None = None,
                model: str | None = None, plugin_params: str | dict | None = None, plugin_flags: bool = False,
                speculation_gamma: int | None = None, api_key: str | None = None,
                allowed_hosts: list[str] | None = None, metrics_open: bool | None = None,
                prefix_cache_mb: float | None = None) -> ServiceConfig:
    """Read and validate config.json (or the defaults when `path` is None), with command-line overrides.

    host/port/model/speculation_gamma/api_key/allowed_hosts/metrics_open override
    ServerConfig.ipAddress/port, ModelConfig[0].modelWeightPath, ModelDeployConfig.speculationGamma
    and ServerConfig.apiKey/allowedHosts/metricsOpen (prefix_cache_mb: ScheduleConfig.prefixCacheMB);
    with plugin_flags=True, `plugin_params` (None = plain decoding) replaces ModelConfig[0].plugin_params. Without a file, memory_decoding is on unless
    plugin flags say otherwise. Raises ServiceConfigError listing every problem.
    """
    if path is None:
        raw: dict = {"BackendConfig": {"ModelDeployConfig": {"ModelConfig": [
            {"modelWeightPath": "default", "plugin_params": DEFAULT_PLUGIN_PARAMS}]}}}
    else:
        raw = read_config_file(path)
        if model is None and not _has_model_entry(raw):   # never serve a default model by accident
            raise ServiceConfigError([f"config file {str(path)!r} has no {_MODEL_PATH}; add one entry such as "
                                      '[{"modelName": "smollm2", "modelWeightPath": "default"}], or pass --model'])
    server = raw.setdefault("ServerConfig", {}) if isinstance(raw.get("ServerConfig", {}), dict) else None
    if server is not None:
        for key, value in (("ipAddress", host), ("port", port), ("apiKey", api_key),
                           ("allowedHosts", allowed_hosts), ("metricsOpen", metrics_open)):
            if value is not None:
                server[key] = value
    entry = _first_model_entry(raw)
    if prefix_cache_mb is not None and isinstance(raw["BackendConfig"], dict):
        schedule = raw["BackendConfig"].setdefault("ScheduleConfig", {})
        if isinstance(schedule, dict):
            schedule["prefixCacheMB"] = prefix_cache_mb
    deploy = raw["BackendConfig"].get("ModelDeployConfig") if isinstance(raw["BackendConfig"], dict) else None
    if speculation_gamma is not None and isinstance(deploy, dict):
        deploy["speculationGamma"] = speculation_gamma
    if entry is not None:
        if model is not None:
            entry["modelWeightPath"] = model
        if plugin_flags:
            entry.pop("plugin_params", None)
            if plugin_params is not None:
                entry["plugin_params"] = plugin_params
    config = parse_config(raw)
    config.source = None if path is None else str(path)
    return config


def read_config_file(path: str | os.PathLike) -> dict:
    """config.json -> dict, refusing files that are missing, empty, over 10 MB or not a JSON object."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise ServiceConfigError([f"cannot read config file {str(p)!r}: {e.strerror}"]) from None
    if not p.is_file():
        raise ServiceConfigError([f"config file {str(p)!r} is not a file; pass the path of config.json"])
    if size == 0 or size > MAX_CONFIG_BYTES:
        raise ServiceConfigError([f"config file {str(p)!r} is {size} bytes; it must be more than 0 and at most "
                                  f"{MAX_CONFIG_BYTES} bytes (10 MB)"])
    try:
        raw = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ServiceConfigError([f"config file {str(p)!r} is not UTF-8 text (byte {e.start}); save it as UTF-8"]) \
            from None
    except json.JSONDecodeError as e:
        raise ServiceConfigError([f"config file {str(p)!r} is not valid JSON: {e.msg} at line {e.lineno}, "
                                  f"column {e.colno}; fix the syntax there"]) from None
    except RecursionError:
        raise ServiceConfigError([f"config file {str(p)!r} nests its JSON deeper than any config needs; "
                                  "use the layout of examples/config.json"]) from None
    if not isinstance(raw, dict):
        raise ServiceConfigError([f"config file {str(p)!r} must hold a JSON object with ServerConfig and "
                                  "BackendConfig, not a JSON " + type(raw).__name__])
    return raw


def parse_config(raw: dict) -> ServiceConfig:
    """A config.json dict -> ServiceConfig; raises ServiceConfigError with every problem found."""
    problems: list[str] = []
    notes: list[str] = []
    top = Section("", raw, problems, notes)
    top.get("Version", str, "1.0.0")
    top.get("EnableDynamicAdjustTimeoutConfig", bool, False)

    log = top.section("LogConfig")
    level_name = log.get("logLevel", str, "Info")
    log_level = LOG_LEVELS.get(level_name.lower())
    if log_level is None:
        problems.append(f"LogConfig.logLevel={level_name!r} is unknown; use one of Verbose, Debug, Info, "
                        "Warning, Error")
        log_level = logging.INFO
    log.check_unknown(mindie_keys.LOG)

    s = top.section("ServerConfig")
    server = ServerConfig(
        ip_address=s.get("ipAddress", str, "127.0.0.1"),
        port=s.get("port", int, 1025, 1024, 65535),
        allow_all_zero_ip_listening=s.get("allowAllZeroIpListening", bool, False),
        max_link_num=s.get("maxLinkNum", int, 1000, 1, 100_000),
        token_timeout=s.get("tokenTimeout", float, 600.0, 0.001, 86_400),
        e2e_timeout=s.get("e2eTimeout", float, 600.0, 0.001, 86_400),
        api_key=s.get("apiKey", str, None),
        allowed_hosts=s.get("allowedHosts", list, None),
        metrics_open=s.get("metricsOpen", bool, False),
        body_timeout=s.get("bodyTimeout", float, 60.0, 0.001, 86_400),
        shutdown_grace=s.get("shutdownGrace", float, 30.0, 0, 86_400))
    _check_address(server, problems)
    _check_access(server, problems)
    if s.get("httpsEnabled", bool, False):
        notes.append("ServerConfig.httpsEnabled=true is not supported: paraspec serves plain HTTP; terminate "
                     "TLS at the load balancer or a reverse proxy")
    s.check_unknown(mindie_keys.SERVER)

    backend = top.section("BackendConfig")
    d = backend.section("ModelDeployConfig")
    deploy = ModelDeployConfig(
        max_seq_len=d.get("maxSeqLen", int, 2560, 2, 1 << 20),
        max_input_token_len=d.get("maxInputTokenLen", int, 2048, 1, 1 << 20),
        truncation=d.get("truncation", bool, False, int_as_bool=True),
        speculation_gamma=_engine_key(d, "speculation_gamma"))
    if deploy.max_input_token_len >= deploy.max_seq_len:
        problems.append(f"BackendConfig.ModelDeployConfig.maxInputTokenLen={deploy.max_input_token_len} must be "
                        f"below maxSeqLen={deploy.max_seq_len}; use a value from 1 to {deploy.max_seq_len - 1}")
    deploy.model = _model_config(d, problems, notes)
    d.check_unknown(mindie_keys.DEPLOY)

    sc = backend.section("ScheduleConfig")
    schedule = ScheduleConfig(max_batch_size=_engine_key(sc, "max_batch_size"),
                              max_iter_times=sc.get("maxIterTimes", int, 512, 1, 1 << 20),
                              prefill_chunk_size=_engine_key(sc, "prefill_chunk"),
                              prefix_cache_mb=_engine_key(sc, "prefix_cache_mb"))
    sc.check_unknown(mindie_keys.SCHEDULE)
    backend.check_unknown(mindie_keys.BACKEND)
    top.check_unknown(mindie_keys.TOP)

    _check_plugin(deploy, schedule, problems, notes)
    if problems:
        raise ServiceConfigError(problems)
    return ServiceConfig(server, deploy, schedule, log_level, notes)


# ------------------------------------------------------------------------------------ checks

_MODEL_PATH = "BackendConfig.ModelDeployConfig.ModelConfig"


def _engine_key(section: Section, name: str):
    """An engine option's config.json key, with the type, default and range EngineArgs declares."""
    s = spec(name)
    return section.get(s.config_key.rsplit(".", 1)[1], s.number, getattr(DEFAULTS, name), s.low, s.high)


def _has_model_entry(raw: dict) -> bool:
    backend = raw.get("BackendConfig")
    deploy = backend.get("ModelDeployConfig") if isinstance(backend, dict) else None
    return isinstance(deploy, dict) and "ModelConfig" in deploy


def _first_model_entry(raw: dict) -> dict | None:
    """ModelConfig[0] as a mutable dict (for command-line overrides), created when absent."""
    backend = raw.setdefault("BackendConfig", {})
    if not isinstance(backend, dict):
        return None
    deploy = backend.setdefault("ModelDeployConfig", {})
    if not isinstance(deploy, dict):
        return None
    models = deploy.setdefault("ModelConfig", [{}])
    if isinstance(models, list) and not models:
        models.append({})
    return models[0] if isinstance(models, list) and isinstance(models[0], dict) else None


def _model_config(deploy: Section, problems: list[str], notes: list[str]) -> ModelConfig:
    models = deploy.get("ModelConfig", list, [{}])
    if len(models) != 1:
        problems.append(f"{_MODEL_PATH} has {len(models)} entries; paraspec serves one model per process, so "
                        "keep exactly one")
        if not models:
            return ModelConfig()
    m = Section(f"{_MODEL_PATH}[0]", models[0], problems, notes)
    name = m.get("modelName", str, None)
    weights = m.get("modelWeightPath", str, "default")
    plugin_params = m.get("plugin_params", (str, dict), None)
    m.check_unknown(mindie_keys.MODEL)
    if name is not None and not name.strip():
        problems.append(f"{_MODEL_PATH}[0].modelName is empty; give the name clients will pass as `model`, "
                        "or leave it out to use the model's own name")
    if weights in catalog.MODELS and not catalog.is_fetched(weights):    # a fetched model's name, as --model
        problems.append(f"{_MODEL_PATH}[0].modelWeightPath={weights!r} is not fetched; "
                        f"{catalog.fetch_hint(weights)}")
    elif weights not in ("default", *catalog.MODELS) and not Path(weights).expanduser().exists():
        problems.append(f"{_MODEL_PATH}[0].modelWeightPath={weights!r} does not exist; give a .gguf file, a Hugging "
                        f"Face model folder, \"default\" (the bundled SmolLM2-135M-Instruct) or {'/'.join(catalog.MODELS)}")
    return ModelConfig(name, weights, plugin_params)


def _check_address(server: ServerConfig, problems: list[str]) -> None:
    host = server.ip_address
    if host == "localhost":
        return
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        problems.append(f"ServerConfig.ipAddress={host!r} is not an IPv4 or IPv6 address; use e.g. \"127.0.0.1\"")
        return
    if addr.is_unspecified and not server.allow_all_zero_ip_listening:
        problems.append(f"ServerConfig.ipAddress={host!r} listens on every interface; set "
                        "ServerConfig.allowAllZeroIpListening to true to allow it, or bind one address")


def _check_access(server: ServerConfig, problems: list[str]) -> None:
    if server.api_key is not None and (not server.api_key.strip() or server.api_key != server.api_key.strip()
                                       or not server.api_key.isprintable() or not server.api_key.isascii()):
        problems.append("ServerConfig.apiKey must be printable ASCII without spaces at either end (it travels "
                        "in an HTTP header); leave it out for no key")
        server.api_key = None
    hosts = server.allowed_hosts
    if hosts is not None and (not hosts or not all(isinstance(h, str) and h.strip() for h in hosts)):
        problems.append("ServerConfig.allowedHosts must be a non-empty list of host names such as "
                        '["localhost", "api.example.com"], or ["*"] for any')
        server.allowed_hosts = None


def _check_plugin(deploy: ModelDeployConfig, schedule: ScheduleConfig, problems: list[str],
                  notes: list[str]) -> None:
    """plugin_params against speculationGamma (each algorithm's own rule) and, with dynamic_algo,
    maxIterTimes >= the longest output the file allows + speculationGamma (MindIE's rule)."""
    model = deploy.model
    if model.plugin_params is None:
        return
    where = f"{_MODEL_PATH}[0].plugin_params"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.plugin = parse_plugin_params(model.plugin_params)
        notes += [f"{where}: {w.message}" for w in caught]
    except ConfigError as e:
        problems.append(f"{where}: " + str(e).removeprefix("plugin_params").lstrip(".: "))
        return
    if model.plugin is not None and deploy.speculation_gamma is not None:
        try:
            model.plugin.check_gamma(deploy.speculation_gamma)
        except ConfigError as e:     # plugin_params valid by themselves: the field at fault is gamma
            msg = str(e).replace("speculation_gamma", "speculationGamma")
            problems.append(f"BackendConfig.ModelDeployConfig.{msg}")
            return
    if model.plugin is None or not model.plugin.dynamic_algo:
        return
    gamma = deploy.speculation_gamma if deploy.speculation_gamma is not None else model.plugin.speculation_need
    max_output = deploy.max_seq_len - deploy.max_input_token_len
    if schedule.max_iter_times < max_output + gamma:
        problems.append(
            f"BackendConfig.ScheduleConfig.maxIterTimes={schedule.max_iter_times} is too small with dynamic_algo: "
            f"it must be >= the longest output (maxSeqLen - maxInputTokenLen = {max_output}) + speculationGamma "
            f"({gamma}) = {max_output + gamma}; raise maxIterTimes or lower maxSeqLen")

