"""`paraspec generate`: one prompt from the command line; prints the text (stats on stderr) or one
JSON object. Loads the model in generate_main, not at import: `paraspec --help` stays quick."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .cli_flags import add_model_args, add_plugin_args, engine_args_from_cli
from .errors import ParaspecError
from .sampling.params import SamplingParams


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="generate text for one prompt")
    add_model_args(g)
    add_plugin_args(g)
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
    g.add_argument(
        "--chat", action="store_true", help="wrap the prompt in the model's chat template"
    )
    g.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: text, token_ids, finish_reason, stats",
    )
    g.add_argument(
        "--compare-ar",
        action="store_true",
        help="also run the same prompt with plain (autoregressive) decoding in the same engine, "
        "before and after: both tok/s, the speedup and whether the tokens are the same",
    )
    g.add_argument(
        "--trie-file",
        default=None,
        help="memory_decoding, hybrid: load the drafting memory (trie, past outputs) from / "
        "save it to this file",
    )
    g.set_defaults(func=generate_main)


def generate_main(args: argparse.Namespace) -> int:
    from .api import LLM  # (torch and the model code load here)

    if (args.prompt is None) == (args.prompt_file is None):
        raise ParaspecError("give a PROMPT or --prompt-file FILE (exactly one)")
    if args.prompt_file is not None:
        try:
            with open(args.prompt_file, encoding="utf-8") as f:
                prompt = f.read()
        except OSError as e:
            raise ParaspecError(
                f"cannot read --prompt-file {args.prompt_file!r}: {e.strerror}"
            ) from None
    else:
        prompt = args.prompt
    params = SamplingParams(
        max_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        repetition_penalty=args.repetition_penalty,
        presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
        stop=args.stop or [],
        ignore_eos=args.ignore_eos,
    )
    llm = LLM.from_engine_args(engine_args_from_cli(args))
    keeps_memory = llm.drafter is not None and llm.drafter.trie is not None
    if args.trie_file and keeps_memory and os.path.exists(args.trie_file):
        llm.load_memory(args.trie_file)

    def run():
        if args.chat:
            return llm.chat([{"role": "user", "content": prompt}], params)[0]
        return llm.generate(prompt, params)[0]

    def run_ar():  # plain decoding: nothing drafts, nothing is remembered
        drafter, llm.engine.default_drafter = llm.engine.default_drafter, None
        try:
            return run()
        finally:
            llm.engine.default_drafter = drafter

    # --compare-ar: plain decoding before and after, the faster of the two its figure (on a busy
    # machine the parallel run is not flattered by a slow moment of AR's)
    ars = [run_ar()] if args.compare_ar else []
    out = run()
    if args.trie_file and keeps_memory:
        llm.save_memory(args.trie_file)
    if ars:
        ars.append(run_ar())
    ar = max(ars, key=lambda r: r.stats["tokens_per_s"]) if ars else None
    comparison = _comparison(out, ars, params) if ar is not None else None
    if args.json:
        result = {
            "text": out.text,
            "token_ids": out.token_ids,
            "finish_reason": out.finish_reason,
            "stats": out.stats,
        }
        if comparison is not None:
            result["ar"] = {"stats": ar.stats, **comparison}
        print(json.dumps(result))
        return 0
    print(out.text)
    s = out.stats
    print(
        f"[{s['generated_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s decode, ttft {s['ttft_s'] * 1e3:.0f} ms, "
        f"{s['mean_accepted_tokens_per_step']:.2f} tokens/step]",
        file=sys.stderr,
    )
    # why the steps without a draft had none (decoding/contract/stats.py)
    if s.get("no_draft_steps"):
        reasons = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s["no_draft_steps"].items())
        print(
            f"[{sum(s['no_draft_steps'].values())} of {s['decode_steps']} steps without a draft: {reasons}]",
            file=sys.stderr,
        )
    if comparison is not None:
        a = ar.stats
        same = {True: ", the same tokens", False: ", DIFFERENT tokens", None: ""}[
            comparison["same_tokens"]
        ]
        speedup = comparison["speedup_over_ar"]
        print(
            f"[plain decoding, same engine (best of 2 runs, before and after): {a['generated_tokens']} tokens, "
            f"{a['tokens_per_s']:.1f} tok/s decode, "
            f"{a['mean_accepted_tokens_per_step']:.2f} tokens/step; parallel decoding "
            f"{'%.2fx' % speedup if speedup else '-'} AR{same}]",
            file=sys.stderr,
        )
    return 0


def _comparison(out, ars: list, params: SamplingParams) -> dict:
    """Parallel decoding's run against plain decoding's (the faster of its runs): decode tok/s over
    AR's, and whether the tokens are the same (lossless: greedy or seeded runs must be; unseeded
    sampling may differ)."""
    exact = params.temperature == 0 or params.seed is not None
    ar_rate = max(a.stats["tokens_per_s"] for a in ars)
    return {
        "speedup_over_ar": round(out.stats["tokens_per_s"] / ar_rate, 3) if ar_rate > 0 else None,
        "same_tokens": all(out.token_ids == a.token_ids for a in ars) if exact else None,
        "ar_tokens_per_s": [a.stats["tokens_per_s"] for a in ars],
    }
