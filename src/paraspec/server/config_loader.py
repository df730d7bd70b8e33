"""Reading config.json into a ServiceConfig: the file's size and encoding, the command-line
overrides, and every section's keys with their types and ranges (config.py: the schema).

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
from pathlib import Path

from ..engine_args import DEFAULTS, spec
from . import mindie_keys
from .config import (
    DEFAULT_PLUGIN_PARAMS,
    ModelDeployConfig,
    ScheduleConfig,
    ServerConfig,
    ServiceConfig,
    ServiceConfigError,
)
from .config_model import MODEL_PATH, check_plugin, read_model_entry
from .json_reader import Section

MAX_CONFIG_BYTES = 10 * 1024 * 1024  # MindIE reads files of (0, 10 MB]
LOG_LEVELS = {
    "verbose": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def load_config(
    path: str | os.PathLike | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    model: str | None = None,
    plugin_params: str | dict | None = None,
    plugin_flags: bool = False,
    speculation_gamma: int | None = None,
    api_key: str | None = None,
    allowed_hosts: list[str] | None = None,
    metrics_open: bool | None = None,
    prefix_cache_mb: float | None = None,
) -> ServiceConfig:
    """Read and validate config.json (or the defaults when `path` is None), with command-line overrides.

    host/port/model/speculation_gamma/api_key/allowed_hosts/metrics_open override
    ServerConfig.ipAddress/port, ModelConfig[0].modelWeightPath, ModelDeployConfig.speculationGamma
    and ServerConfig.apiKey/allowedHosts/metricsOpen (prefix_cache_mb: ScheduleConfig.prefixCacheMB);
    with plugin_flags=True, `plugin_params` (None = plain decoding) replaces ModelConfig[0].plugin_params. Without a file, memory_decoding is on unless
    plugin flags say otherwise. Raises ServiceConfigError listing every problem.
    """
    if path is None:
        raw: dict = {
            "BackendConfig": {
                "ModelDeployConfig": {
                    "ModelConfig": [
                        {"modelWeightPath": "default", "plugin_params": DEFAULT_PLUGIN_PARAMS}
                    ]
                }
            }
        }
    else:
        raw = read_config_file(path)
        if model is None and not _has_model_entry(raw):  # never serve a default model by accident
            raise ServiceConfigError(
                [
                    f"config file {str(path)!r} has no {MODEL_PATH}; add one entry such as "
                    '[{"modelName": "smollm2", "modelWeightPath": "default"}], or pass --model'
                ]
            )
    server = (
        raw.setdefault("ServerConfig", {})
        if isinstance(raw.get("ServerConfig", {}), dict)
        else None
    )
    if server is not None:
        for key, value in (
            ("ipAddress", host),
            ("port", port),
            ("apiKey", api_key),
            ("allowedHosts", allowed_hosts),
            ("metricsOpen", metrics_open),
        ):
            if value is not None:
                server[key] = value
    entry = _first_model_entry(raw)
    if prefix_cache_mb is not None and isinstance(raw["BackendConfig"], dict):
        schedule = raw["BackendConfig"].setdefault("ScheduleConfig", {})
        if isinstance(schedule, dict):
            schedule["prefixCacheMB"] = prefix_cache_mb
    deploy = (
        raw["BackendConfig"].get("ModelDeployConfig")
        if isinstance(raw["BackendConfig"], dict)
        else None
    )
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
        raise ServiceConfigError(
            [f"config file {str(p)!r} is not a file; pass the path of config.json"]
        )
    if size == 0 or size > MAX_CONFIG_BYTES:
        raise ServiceConfigError(
            [
                f"config file {str(p)!r} is {size} bytes; it must be more than 0 and at most "
                f"{MAX_CONFIG_BYTES} bytes (10 MB)"
            ]
        )
    try:
        raw = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ServiceConfigError(
            [f"config file {str(p)!r} is not UTF-8 text (byte {e.start}); save it as UTF-8"]
        ) from None
    except json.JSONDecodeError as e:
        raise ServiceConfigError(
            [
                f"config file {str(p)!r} is not valid JSON: {e.msg} at line {e.lineno}, "
                f"column {e.colno}; fix the syntax there"
            ]
        ) from None
    except RecursionError:
        raise ServiceConfigError(
            [
                f"config file {str(p)!r} nests its JSON deeper than any config needs; "
                "use the layout of examples/config.json"
            ]
        ) from None
    if not isinstance(raw, dict):
        raise ServiceConfigError(
            [
                f"config file {str(p)!r} must hold a JSON object with ServerConfig and "
                "BackendConfig, not a JSON " + type(raw).__name__
            ]
        )
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
        problems.append(
            f"LogConfig.logLevel={level_name!r} is unknown; use one of Verbose, Debug, Info, "
            "Warning, Error"
        )
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
        shutdown_grace=s.get("shutdownGrace", float, 30.0, 0, 86_400),
    )
    _check_address(server, problems)
    _check_access(server, problems)
    if s.get("httpsEnabled", bool, False):
        notes.append(
            "ServerConfig.httpsEnabled=true is not supported: paraspec serves plain HTTP; terminate "
            "TLS at the load balancer or a reverse proxy"
        )
    s.check_unknown(mindie_keys.SERVER)

    backend = top.section("BackendConfig")
    d = backend.section("ModelDeployConfig")
    deploy = ModelDeployConfig(
        max_seq_len=d.get("maxSeqLen", int, 2560, 2, 1 << 20),
        max_input_token_len=d.get("maxInputTokenLen", int, 2048, 1, 1 << 20),
        truncation=d.get("truncation", bool, False, int_as_bool=True),
        speculation_gamma=_engine_key(d, "speculation_gamma"),
    )
    if deploy.max_input_token_len >= deploy.max_seq_len:
        problems.append(
            f"BackendConfig.ModelDeployConfig.maxInputTokenLen={deploy.max_input_token_len} must be "
            f"below maxSeqLen={deploy.max_seq_len}; use a value from 1 to {deploy.max_seq_len - 1}"
        )
    deploy.model = read_model_entry(d, problems, notes)
    d.check_unknown(mindie_keys.DEPLOY)

    sc = backend.section("ScheduleConfig")
    schedule = ScheduleConfig(
        max_batch_size=_engine_key(sc, "max_batch_size"),
        max_iter_times=sc.get("maxIterTimes", int, 512, 1, 1 << 20),
        prefill_chunk_size=_engine_key(sc, "prefill_chunk"),
        prefix_cache_mb=_engine_key(sc, "prefix_cache_mb"),
    )
    sc.check_unknown(mindie_keys.SCHEDULE)
    backend.check_unknown(mindie_keys.BACKEND)
    top.check_unknown(mindie_keys.TOP)

    check_plugin(deploy, schedule, problems, notes)
    if problems:
        raise ServiceConfigError(problems)
    return ServiceConfig(server, deploy, schedule, log_level, notes)


# ------------------------------------------------------------------------------------ checks


def _engine_key(section: Section, name: str):
    """An engine option's config.json key, with the type, default and range EngineArgs declares."""
    s = spec(name)
    return section.get(
        s.config_key.rsplit(".", 1)[1], s.number, getattr(DEFAULTS, name), s.low, s.high
    )


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


def _check_address(server: ServerConfig, problems: list[str]) -> None:
    host = server.ip_address
    if host == "localhost":
        return
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        problems.append(
            f'ServerConfig.ipAddress={host!r} is not an IPv4 or IPv6 address; use e.g. "127.0.0.1"'
        )
        return
    if addr.is_unspecified and not server.allow_all_zero_ip_listening:
        problems.append(
            f"ServerConfig.ipAddress={host!r} listens on every interface; set "
            "ServerConfig.allowAllZeroIpListening to true to allow it, or bind one address"
        )


def _check_access(server: ServerConfig, problems: list[str]) -> None:
    if server.api_key is not None and (
        not server.api_key.strip()
        or server.api_key != server.api_key.strip()
        or not server.api_key.isprintable()
        or not server.api_key.isascii()
    ):
        problems.append(
            "ServerConfig.apiKey must be printable ASCII without spaces at either end (it travels "
            "in an HTTP header); leave it out for no key"
        )
        server.api_key = None
    hosts = server.allowed_hosts
    if hosts is not None and (
        not hosts or not all(isinstance(h, str) and h.strip() for h in hosts)
    ):
        problems.append(
            "ServerConfig.allowedHosts must be a non-empty list of host names such as "
            '["localhost", "api.example.com"], or ["*"] for any'
        )
        server.allowed_hosts = None
