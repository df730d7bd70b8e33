"""The engine's options, each declared once: its type, default, allowed values, help and check.

`EngineArgs` is what LLM() is built from (api.py). The front ends read this declaration instead of
restating it: the `generate`, `serve` and `bench` flags (add_cli_args, cli_flags.py), the server's
config.json keys with their defaults and ranges (server/config.py), Ray Serve's replicas
(ray_serve/options.py) and the bench plan (bench/plan.py). `check()` validates every field once,
each problem one line naming the field and the fix, and returns the args normalised
(activation_passes "1" -> 1; plugin_params parsed into a PluginConfig).
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
from dataclasses import dataclass, field
from typing import Any

from . import aspd
from .decoding.drafters.plugins import PluginConfig, parse_plugin_params, register_plugin
from .errors import ConfigError

# ASPD decodes on top of the drafters, so the decoding layer cannot name it; it joins their table here,
# where plugin_params are parsed
register_plugin("aspd", aspd.PLUGIN)


@dataclass(frozen=True)
class Spec:
    """What the declaration says of one option beside its default (a dataclass field's metadata)."""

    help: str
    error: str = ""  # the one-line error after "name=value " (default: from the range)
    choices: tuple = ()  # the values allowed, None included where it is one; () = a range or any
    number: type | None = (
        None  # int or float: a number in [low, high] (None allowed where the default is)
    )
    low: float | None = None
    high: float | None = None
    flag: str | None = None  # the command-line flag; None: LLM() and config.json only
    group: str = "model"  # which flags a sub-command takes: "model", "plugin" or "schedule"
    cli_choices: tuple | None = None  # argparse's choices (default: choices; (): any string)
    config_key: str | None = None  # the MindIE config.json key, "Section.key"

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_") if self.flag else ""


def _option(default: Any, help: str, **spec: Any) -> Any:
    return field(default=default, metadata={"spec": Spec(help, **spec)})


@dataclass(frozen=True)
class EngineArgs:
    model: str | None = _option(
        "default",
        "a .gguf file, a Hugging Face folder, 'default' (bundled SmolLM2-135M-Instruct) or a "
        "fetched model (`paraspec fetch --list`)",
        flag="--model",
    )
    dtype: str = _option(
        "auto",
        "the weights' dtype: 'auto' (the fastest exact numerics for this CPU, see `paraspec info`), "
        "'bfloat16' or 'float32' (a GGUF file dequantised)",
        error="is not supported; use 'auto', 'bfloat16' or 'float32'",
        choices=("auto", "bfloat16", "float32", "bf16", "fp32"),
        cli_choices=("auto", "bfloat16", "float32"),
        flag="--dtype",
    )
    quantization: str | None = _option(
        "auto",
        "'w8a8' (int8 weights and per-token int8 activations), 'gguf' (a .gguf file's own "
        "Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K blocks), 'none', or 'auto' (chosen for this CPU and model with "
        "dtype auto)",
        error="is not supported; use 'w8a8', 'gguf' (a .gguf file's own blocks), 'none' or 'auto' "
        "(chosen for this CPU)",
        choices=("auto", "none", "w8a8", "gguf", "", None),
        cli_choices=(),
        flag="--quantization",
    )
    kv_cache_dtype: str = _option(
        "fp32",
        "the KV cache's elements: fp32 (default) or fp16 (half its memory and the bytes a decode "
        "step reads per token of context; parallel decoding stays token-identical to plain decoding "
        "with the same cache dtype)",
        error="is not supported; use 'fp32' (default) or 'fp16' (half the cache's memory and bytes read "
        "per step)",
        choices=("fp32", "fp16"),
        flag="--kv-cache-dtype",
    )
    activation_passes: int | str = _option(
        "auto",
        "int8 activation passes of GGUF / W8A8 linears: 1 (llama.cpp's Q8 numerics), 2 (plus the "
        "rounding residual: closer to fp32, twice the integer work per row), auto (default: 1 for GGUF "
        "blocks on the compiled kernels, else 2); parallel decoding is token-identical under either",
        error="is invalid; use 'auto' (default), 1 (llama.cpp's Q8 activations) or 2 (plus the rounding "
        "residual)",
        choices=("auto", 1, 2),
        cli_choices=("auto", "1", "2"),
        flag="--activation-passes",
    )
    num_threads: int | None = _option(
        None,
        "torch CPU threads (default: all cores)",
        error="is invalid; use a positive integer (--threads; default: all cores)",
        number=int,
        low=1,
        flag="--threads",
    )
    kernels: str | None = _option(
        None,
        "the compiled CPU kernels: 'auto', 'avx512', 'avx2' or 'torch' (default: $PARASPEC_KERNELS "
        "or the best this CPU runs)",
    )
    plugin_params: str | dict | PluginConfig | None = _option(
        None,
        "the MindIE plugin_params JSON string (or dict) choosing parallel decoding, e.g. "
        '\'{"plugin_type":"memory_decoding","decoding_length":16,"dynamic_algo":true}\'',
        flag="--plugin-params",
        group="plugin",
    )
    speculation_gamma: int | None = _option(
        None,
        "MindIE speculationGamma: the most draft tokens one request verifies per step (checked "
        "against plugin_params)",
        number=int,
        low=0,
        high=1024,
        flag="--speculation-gamma",
        group="plugin",
        config_key="ModelDeployConfig.speculationGamma",
    )
    max_batch_size: int = _option(
        8,
        "sequences decoded together in one forward; the rest wait",
        number=int,
        low=1,
        high=256,
        group="schedule",
        config_key="ScheduleConfig.maxBatchSize",
    )
    prefill_chunk: int = _option(
        256,
        "prompt tokens per prefill forward; a long prompt's chunks take turns with the running "
        "requests' decode steps (smaller: steadier streaming, a little slower prefill)",
        number=int,
        low=16,
        high=8192,
        group="schedule",
        config_key="ScheduleConfig.prefillChunkSize",
    )
    draft_gate: bool | None = _option(
        None,
        "skip a request's draft lookup on steps where looking has not paid (decoding/policy/gate.py); "
        "False: ask the drafter every step (default: on, unless $PARASPEC_DRAFT_GATE=0)",
        error="is invalid; use true (default), false (ask the drafter every step) or null",
        choices=(None, True, False),
        group="schedule",
    )
    prefix_cache_mb: float = _option(
        256,
        "memory for the KV of prompt chunks prefilled before (0: off): a prompt starting with such "
        "whole chunks (a system prompt, earlier turns) copies their KV instead of prefilling them again",
        error=f"is invalid; use a number of MB from 0 (off) to {1 << 20}",
        number=float,
        low=0,
        high=1 << 20,
        flag="--prefix-cache-mb",
        group="schedule",
        config_key="ScheduleConfig.prefixCacheMB",
    )

    def check(self) -> "EngineArgs":
        """Every field validated (ConfigError: one line naming the field and the fix); the args
        normalised: activation_passes an int or "auto", plugin_params a PluginConfig or None."""
        values = {name: _check(name, s, getattr(self, name)) for name, s in _SPECS.items()}
        plugin, gamma = values["plugin_params"], values["speculation_gamma"]
        if not isinstance(plugin, PluginConfig):
            values["plugin_params"] = parse_plugin_params(plugin, gamma)
        return EngineArgs(**values)

    @property
    def plugin(self) -> PluginConfig | None:
        """The parsed plugin_params (after check())."""
        return self.plugin_params if isinstance(self.plugin_params, PluginConfig) else None

    @classmethod
    def from_cli(
        cls,
        args: argparse.Namespace,
        groups: tuple[str, ...] = ("model", "plugin", "schedule"),
        **given: Any,
    ) -> "EngineArgs":
        """The flags add_cli_args made for `groups`, read back (a flag absent or None: the default),
        with `given` (e.g. the plugin_params cli_flags builds from --plugin and its flags) on top."""
        values = {
            name: getattr(args, s.dest)
            for name, s in _SPECS.items()
            if s.flag and s.group in groups and getattr(args, s.dest, None) is not None
        }
        return cls(**{**values, **given})


DEFAULTS = EngineArgs()


def spec(name: str) -> Spec:
    return _SPECS[name]


_SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in dataclasses.fields(EngineArgs)}


def _check(name: str, s: Spec, value: Any) -> Any:
    if s.choices:
        if isinstance(value, str) and value.strip().isdigit() and int(value) in s.choices:
            value = int(value)  # a flag's "1"
        # a bool only where the choices are bools (True == 1 would pass for 1, and 1 for True)
        bools = any(isinstance(c, bool) for c in s.choices)
        if (value is not None and isinstance(value, bool) != bools) or value not in s.choices:
            raise ConfigError(f"{name}={value!r} {s.error}", param=name)
    elif s.number is not None and not (value is None and getattr(DEFAULTS, name, 0) is None):
        kinds = (int, float) if s.number is float else (int,)
        if (
            isinstance(value, bool)
            or not isinstance(value, kinds)
            or (s.low is not None and value < s.low)
            or (s.high is not None and value > s.high)
        ):
            raise ConfigError(f"{name}={value!r} {s.error or _range(s)}", param=name)
    return value


def _range(s: Spec) -> str:
    kind = "an integer" if s.number is int else "a number"
    return f"is invalid; use {kind} from {s.low:g}" + ("" if s.high is None else f" to {s.high:g}")


def add_cli_args(p: argparse.ArgumentParser | Any, group: str, overrides: bool = False) -> None:
    """The flags of one group of options. overrides=True (serve): each defaults to None, so that
    "not given" leaves the config file's value, and the help names the file's key."""
    for name, s in _SPECS.items():
        if s.flag is None or s.group != group:
            continue
        default = getattr(DEFAULTS, name)
        kw: dict[str, Any] = {"default": None if overrides else default, "help": s.help}
        choices = s.choices if s.cli_choices is None else s.cli_choices
        if choices:
            kw["choices"] = [str(c) for c in choices]
        elif s.number is not None:
            kw["type"] = s.number
        if overrides and s.config_key:
            kw["help"] = f"{s.help} (default {default}, {s.config_key})"
        p.add_argument(s.flag, **kw)


def describe() -> str:
    """Each option and its help, for LLM's docstring."""
    lines = (f"{name} = {getattr(DEFAULTS, name)!r}: {s.help}" for name, s in _SPECS.items())
    return "\n".join(
        textwrap.fill(line, 100, initial_indent="    ", subsequent_indent="        ")
        for line in lines
    )
