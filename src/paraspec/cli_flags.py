"""Flags more than one sub-command takes (the model and its numerics; the parallel decoding plugin),
and the plugin flags read back into MindIE plugin_params. Imported by each sub-command's module, so
none of them imports cli.py."""
from __future__ import annotations

import argparse

from .errors import ParaspecError

PLUGIN_FLAGS = ("decoding_length", "dynamic_algo", "level", "window", "guess_set_size")


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default",
                   help="a .gguf file, a Hugging Face folder, or 'default' (bundled SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                   help="weights' dtype (default auto: the fastest exact numerics for this CPU, see `paraspec info`)")
    p.add_argument("--quantization", default="auto",
                   help="'w8a8' (int8 weights and per-token int8 activations), 'gguf' (a .gguf file's own "
                        "Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K blocks), 'none', or 'auto' "
                        "(default: chosen for this CPU and model with --dtype auto)")
    p.add_argument("--kv-cache-dtype", default="fp32", choices=["fp32", "fp16"],
                   help="the KV cache's elements (default fp32; fp16 halves its memory and the bytes a decode "
                        "step reads per token of context)")
    p.add_argument("--activation-passes", default="auto", choices=["auto", "1", "2"],
                   help="int8 activation passes of GGUF / W8A8 linears: 1 (llama.cpp's Q8 numerics), 2 (plus the "
                        "rounding residual), auto (default: 1 for GGUF blocks on the compiled kernels, else 2)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")


def add_plugin_args(p: argparse.ArgumentParser, default_plugin: str | None = "none") -> None:
    """default_plugin=None (serve) leaves --plugin None when it is not given, so "not given" (the
    config file decides) and `--plugin none` (plain decoding) can be told apart."""
    g = p.add_argument_group("parallel decoding (MindIE plugin_params)")
    g.add_argument("--plugin", choices=["none", "memory_decoding", "lookahead", "la", "hybrid", "aspd"], default=default_plugin,
                   help=f"parallel decoding algorithm (default: {default_plugin or 'the config file, else memory_decoding'})")
    g.add_argument("--plugin-params", default=None, help="the whole plugin_params JSON string")
    g.add_argument("--decoding-length", type=int, default=None, help="memory_decoding: tokens per step, 1-16")
    g.add_argument("--dynamic-algo", action="store_true", default=None, help="memory_decoding: adapt draft length")
    g.add_argument("--level", type=int, default=None, help="lookahead N (3-16)")
    g.add_argument("--window", type=int, default=None, help="lookahead W (1-16)")
    g.add_argument("--guess-set-size", type=int, default=None, help="lookahead G (1-16)")
    g.add_argument("--speculation-gamma", type=int, default=None, help="MindIE speculationGamma (validated)")


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
                raise ParaspecError(f"--{flag.replace('_', '-')} needs --plugin (memory_decoding, lookahead or hybrid)")
        return None
    params: dict = {"plugin_type": args.plugin}
    for flag in PLUGIN_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            params[flag] = value
    return params
