"""Command line: `paraspec generate`, `paraspec serve`, `paraspec bench`, `paraspec info`.

Flags map one to one onto API fields. User errors print one line on stderr and exit with 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import ParaspecError


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default",
                   help="a .gguf file, a Hugging Face folder, or 'default' (bundled SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                   help="weights' dtype (default auto: the fastest exact numerics for this CPU, see `paraspec info`)")
    p.add_argument("--quantization", default="auto",
                   help="'w8a8' (int8 weights and per-token int8 activations), 'none', or 'auto' (default: "
                        "chosen for this CPU with --dtype auto)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")


def _add_plugin_args(p: argparse.ArgumentParser, default_plugin: str | None = "none") -> None:
    g = p.add_argument_group("parallel decoding (MindIE plugin_params)")
    g.add_argument("--plugin", choices=["none", "memory_decoding", "lookahead", "la", "hybrid"], default=default_plugin,
                   help=f"parallel decoding algorithm (default: {default_plugin or 'the config file, else memory_decoding'})")
    g.add_argument("--plugin-params", default=None, help="the whole plugin_params JSON string")
    g.add_argument("--decoding-length", type=int, default=None, help="memory_decoding: tokens per step, 1-16")
    g.add_argument("--dynamic-algo", action="store_true", default=None, help="memory_decoding: adapt draft length")
    g.add_argument("--level", type=int, default=None, help="lookahead N (3-16)")
    g.add_argument("--window", type=int, default=None, help="lookahead W (1-16)")
    g.add_argument("--guess-set-size", type=int, default=None, help="lookahead G (1-16)")
    g.add_argument("--speculation-gamma", type=int, default=None, help="MindIE speculationGamma (validated)")


def plugin_params_from_args(args: argparse.Namespace) -> dict | str | None:
    if args.plugin_params:
        if args.plugin not in (None, "none"):
            raise ParaspecError("pass either --plugin-params or --plugin with its flags, not both")
        return args.plugin_params
    if args.plugin in (None, "none"):
        for flag in ("decoding_length", "dynamic_algo", "level", "window", "guess_set_size"):
            if getattr(args, flag) is not None:
                raise ParaspecError(f"--{flag.replace('_', '-')} needs --plugin (memory_decoding, lookahead or hybrid)")
        return None
    params: dict = {"plugin_type": args.plugin}
    for flag in ("decoding_length", "dynamic_algo", "level", "window", "guess_set_size"):
        value = getattr(args, flag)
        if value is not None:
            params[flag] = value
    return params


def _generate(args: argparse.Namespace) -> int:
    from .api import LLM
    from .sampling.params import SamplingParams

    if (args.prompt is None) == (args.prompt_file is None):
        raise ParaspecError("give a PROMPT or --prompt-file FILE (exactly one)")
    if args.prompt_file is not None:
        try:
            with open(args.prompt_file, encoding="utf-8") as f:
                prompt = f.read()
        except OSError as e:
            raise ParaspecError(f"cannot read --prompt-file {args.prompt_file!r}: {e.strerror}") from None
    else:
        prompt = args.prompt
    params = SamplingParams(max_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                            top_p=args.top_p, seed=args.seed, repetition_penalty=args.repetition_penalty,
                            presence_penalty=args.presence_penalty, frequency_penalty=args.frequency_penalty,
                            stop=args.stop or [], ignore_eos=args.ignore_eos)
    llm = LLM(model=args.model, dtype=args.dtype, plugin_params=plugin_params_from_args(args),
              quantization=args.quantization, speculation_gamma=args.speculation_gamma, num_threads=args.threads)
    keeps_memory = llm.drafter is not None and llm.drafter.trie is not None
    if args.trie_file and keeps_memory and os.path.exists(args.trie_file):
        llm.load_memory(args.trie_file)
    if args.chat:
        out = llm.chat([{"role": "user", "content": prompt}], params)[0]
    else:
        out = llm.generate(prompt, params)[0]
    if args.trie_file and keeps_memory:
        llm.save_memory(args.trie_file)
    if args.json:
        print(json.dumps({"text": out.text, "token_ids": out.token_ids, "finish_reason": out.finish_reason,
                          "stats": out.stats}))
    else:
        print(out.text)
        s = out.stats
        print(f"[{s['generated_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s decode, ttft {s['ttft_s'] * 1e3:.0f} ms, "
              f"{s['mean_accepted_tokens_per_step']:.2f} tokens/step]", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paraspec", description="LLM inference with lossless parallel decoding")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text for one prompt")
    _add_model_args(g)
    _add_plugin_args(g)
    g.add_argument("prompt", nargs="?", default=None, help="the prompt text")
    g.add_argument("--prompt-file", default=None, help="read the prompt from this file")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--presence-penalty", type=float, default=0.0)
    g.add_argument("--frequency-penalty", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--json", action="store_true", help="print one JSON object: text, token_ids, finish_reason, stats")
    g.add_argument("--trie-file", default=None, help="memory_decoding: load the trie from / save it to this file")
    g.set_defaults(func=_generate)

    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server")
    s.add_argument("--config", default=None, help="MindIE-style config.json")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    _add_model_args(s)
    _add_plugin_args(s, default_plugin=None)
    s.set_defaults(func=_serve)

    b = sub.add_parser("bench", help="benchmark paraspec against its peers")
    b.add_argument("--quick", action="store_true", help="smoke run, under a minute")
    b.add_argument("--out", default="bench-out", help="folder for the JSON, Markdown and PNG results")
    b.add_argument("--tasks", default=None, help="comma-separated task sets")
    b.add_argument("--systems", default=None, help="comma-separated systems")
    b.add_argument("--n", type=int, default=None, help="tasks per set")
    b.add_argument("--max-new-tokens", type=int, default=None)
    _add_model_args(b)
    from .bench.run import add_bench_flags
    add_bench_flags(b)
    b.set_defaults(func=_bench)

    from .info import add_parser as add_info_parser
    add_info_parser(sub)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from .server.app import serve_main
    return serve_main(args)


def _bench(args: argparse.Namespace) -> int:
    from .bench.run import bench_main
    return bench_main(args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ParaspecError as e:
        print(f"paraspec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
