"""Flags more than one sub-command takes (the model and its numerics; the parallel decoding plugin),
and the plugin flags read back into MindIE plugin_params. Imported by each sub-command's module, so
none of them imports cli.py."""

from __future__ import annotations

import argparse

from .config import PLUGIN_ALIASES
from .engine_args import EngineArgs, add_cli_args
from .errors import ParaspecError

PLUGIN_FLAGS = ("decoding_length", "dynamic_algo", "level", "window", "guess_set_size")


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model and its numerics (engine_args.py declares each: default, choices, help)."""
    add_cli_args(p, "model")


def add_plugin_args(p: argparse.ArgumentParser, default_plugin: str | None = "none") -> None:
    """default_plugin=None (serve) leaves --plugin None when it is not given, so "not given" (the
    config file decides) and `--plugin none` (plain decoding) can be told apart. The plugin types
    are the plugin table's; each algorithm's own flags are PLUGIN_FLAGS."""
    g = p.add_argument_group("parallel decoding (MindIE plugin_params)")
    g.add_argument(
        "--plugin",
        choices=["none", *PLUGIN_ALIASES],
        default=default_plugin,
        help="parallel decoding algorithm (default: "
        f"{default_plugin or 'the config file, else memory_decoding'})",
    )
    g.add_argument(
        "--decoding-length", type=int, default=None, help="memory_decoding: tokens per step, 1-16"
    )
    g.add_argument(
        "--dynamic-algo",
        action="store_true",
        default=None,
        help="memory_decoding: adapt draft length",
    )
    g.add_argument("--level", type=int, default=None, help="lookahead N (3-16)")
    g.add_argument("--window", type=int, default=None, help="lookahead W (1-16)")
    g.add_argument("--guess-set-size", type=int, default=None, help="lookahead G (1-16)")
    add_cli_args(g, "plugin")


def engine_args_from_cli(args: argparse.Namespace) -> EngineArgs:
    """EngineArgs from the model and plugin flags, checked."""
    return EngineArgs.from_cli(args, plugin_params=plugin_params_from_args(args)).check()


def plugin_params_from_args(args: argparse.Namespace) -> dict | str | None:
    """The plugin flags as plugin_params: the --plugin-params string as given, a dict built from
    --plugin and its flags, or None for plain decoding (--plugin none, or not given)."""
    if args.plugin_params:
        if args.plugin not in (None, "none"):
            raise ParaspecError("pass either --plugin-params or --plugin with its flags, not both")
        return args.plugin_params
    if args.plugin in (None, "none"):
        for flag in PLUGIN_FLAGS:
            if getattr(args, flag) is not None:
                raise ParaspecError(
                    f"--{flag.replace('_', '-')} needs --plugin (memory_decoding, lookahead or hybrid)"
                )
        return None
    params: dict = {"plugin_type": args.plugin}
    for flag in PLUGIN_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            params[flag] = value
    return params
