"""`paraspec aspd build-data | train | export | eval`: ASPD's data, fine-tuning and evaluation.

build-data writes data/aspd/{train,heldout,extracted,heldout_sharegpt}.jsonl and summary.json (stage counts
and the block / serial mix);
train fine-tunes LoRA adapters (ASPD and the plain-text control) into src/paraspec/aspd/adapters;
export merges one into a Hugging Face folder that --model loads; eval compares the two.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .paths import DATA_DIR

SOURCES = ("sharegpt", "packages", "model")
SHAREGPT_TURNS = 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "aspd", help="ASPD (adaptive serial-parallel decoding): data, training, evaluation"
    )
    s = p.add_subparsers(dest="aspd_command", required=True)
    b = s.add_parser(
        "build-data", help="synthetic tasks + structure extracted from plain answers -> JSONL"
    )
    b.add_argument("--out", default=str(DATA_DIR), help="output folder (default: data/aspd)")
    b.add_argument(
        "--train",
        type=int,
        default=300,
        help="synthetic training items (a minority beside ShareGPT)",
    )
    b.add_argument(
        "--heldout", type=int, default=120, help="held-out synthetic items (another seed)"
    )
    b.add_argument("--seed", type=int, default=0, help="training seed; held-out uses seed + 1000")
    b.add_argument(
        "--sources",
        default="sharegpt,packages",
        help="comma list of extraction sources: sharegpt, packages, model",
    )
    b.add_argument(
        "--judge", choices=("rule", "llm", "rule+llm"), default="rule", help="extraction judge"
    )
    b.add_argument(
        "--votes", type=int, default=3, help="judge votes per decision (unanimous by default)"
    )
    b.add_argument(
        "--majority", action="store_true", help="accept on a majority of votes instead of all"
    )
    b.add_argument(
        "--model-answers",
        type=int,
        default=152,
        help="bench chat prompts the bundled model answers (source 'model'; the eval's 20 left out)",
    )
    b.add_argument(
        "--sharegpt",
        default=None,
        metavar="FILE",
        help="ShareGPT JSON file (source 'sharegpt'; default: what `paraspec fetch sharegpt` fetched)",
    )
    b.add_argument(
        "--sharegpt-turns",
        type=int,
        default=SHAREGPT_TURNS,
        help="ShareGPT answers read from the training chats, a seeded random set of whole chats "
        "(0: all; the cap keeps a build to minutes)",
    )
    b.add_argument(
        "--sharegpt-heldout",
        type=int,
        default=200,
        help="held-out ShareGPT examples, one per chat, from the chats the bench holds out too",
    )
    b.add_argument(
        "--block-share",
        type=float,
        default=0.44,
        help="share of training examples with a block, reached by dropping a seeded sample of "
        "ShareGPT's serial examples (default: the paper's 44 %%)",
    )
    b.add_argument(
        "--max-len",
        type=int,
        default=384,
        help="training length in the bundled model's tokens (train's --max-len); ShareGPT turns "
        "that do not fit are skipped, their history cut to what fits",
    )
    b.add_argument(
        "--user-data",
        default=None,
        metavar="FILE.jsonl",
        help='your own {"prompt": ..., "answer": ...} lines, extracted as source "user" '
        "(answers without an accepted block are kept as serial examples)",
    )
    b.set_defaults(func=build_data_main)
    # each sub-command's flags live next to its code
    from . import (
        evaluate,
        pairwise,
        train_command,
    )

    train_command.add_parsers(s)
    evaluate.add_parser(s)
    pairwise.add_parser(s)
    p.set_defaults(func=lambda a: a.func(a))


def build_data_main(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from . import data, judge, pipeline, sources, synth

    for name in (
        "train",
        "heldout",
        "votes",
        "model_answers",
        "sharegpt_turns",
        "sharegpt_heldout",
    ):
        if getattr(args, name) < (1 if name == "votes" else 0):
            raise ConfigError(
                f"--{name.replace('_', '-')} must be >= {1 if name == 'votes' else 0}"
            )
    if not 0 < args.block_share <= 1 or args.max_len < 16:
        raise ConfigError("--block-share must be in (0, 1] and --max-len >= 16")
    wanted = [s.strip() for s in args.sources.split(",") if s.strip()]
    bad = [s for s in wanted if s not in SOURCES]
    if bad:
        raise ConfigError(
            f"--sources: unknown source {bad[0]!r}; use {', '.join(SOURCES)} (comma separated)"
        )
    out = Path(args.out)
    # bad lines fail before any work
    user = sources.user_answers(args.user_data) if args.user_data else None
    convs = None
    if "sharegpt" in wanted:  # a missing or broken file fails before any work too
        from . import sharegpt

        convs, mtbench = sharegpt.conversations(args.sharegpt), sharegpt.MTBench.load()
    train = synth.generate(args.train, args.seed)
    # held-out tasks exclude the default training set's prompts too: the same tasks whatever --train
    seen = {e.prompt for e in synth.generate(max(args.train, 1200), args.seed)}
    heldout = synth.generate(args.heldout, args.seed + 1000, exclude=seen, split="heldout")
    llm = None
    if "model" in wanted or args.judge != "rule":
        from ..api import LLM

        llm = LLM("default")
    make_judge = {
        "rule": judge.RuleJudge,
        "llm": lambda: judge.LLMJudge(llm),
        "rule+llm": lambda: judge.BothJudges(judge.LLMJudge(llm)),
    }[args.judge]
    the_judge = make_judge()
    count = sources.token_counter(llm)
    pipe = pipeline.Pipeline(the_judge, count=count, votes=args.votes, unanimous=not args.majority)
    extracted = []
    if "packages" in wanted:
        extracted += pipe.run(sources.package_answers(count=count), "packages")
    if "model" in wanted:
        # kept serial where no block is accepted: the base model's own answers regularise the fine-tune
        extracted += pipe.run(
            sources.model_answers(llm, args.model_answers), "model", keep_serial=True
        )
    if user is not None:
        # the user's own answers are training data as given: the ones that stay serial teach when not to branch
        extracted += pipe.run(user, "user", keep_serial=True)
    skipped, share, held_sg = {}, None, []
    if convs is not None:
        sg, held_sg, skipped, share = _sharegpt(
            args, convs, mtbench, pipe, make_judge, train + extracted
        )
        extracted += sg
    written = data.write_jsonl(out / "extracted.jsonl", extracted)
    by_source = {
        src: {
            **c,
            **({"skipped": skipped[src]} if src in skipped else {}),
            "written": sum(e.source == src for e in extracted),
        }
        for src, c in pipe.by_source.items()
    }
    summary = {
        "synthetic": {
            "train": data.write_jsonl(out / "train.jsonl", train),
            "heldout": data.write_jsonl(out / "heldout.jsonl", heldout),
            "families": {f: sum(e.family == f for e in train) for f in synth.FAMILIES},
        },
        "extraction": {
            "judge": the_judge.name,
            "votes": args.votes,
            "unanimous": not args.majority,
            "sources": list(by_source),
            "stages": pipe.counts,
            "by_source": by_source,
            "written": written,
        },
    }
    if share is not None:
        from .sharegpt import mix

        summary["sharegpt_heldout"] = {
            **share.pop("heldout_stages"),
            "skipped": skipped["sharegpt-heldout"],
            "written": data.write_jsonl(out / "heldout_sharegpt.jsonl", held_sg),
            "mix": mix(held_sg),
        }
        summary["mix"] = {**mix(train + extracted), "target": args.block_share, **share}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"synthetic: {len(train)} train, {len(heldout)} held-out ({summary['synthetic']['families']})"
    )
    print(
        "extraction ("
        + the_judge.name
        + "): "
        + " -> ".join(f"{k} {v}" for k, v in pipe.counts.items())
    )
    for src, c in by_source.items():
        print(f"  {src}: " + " -> ".join(f"{k} {v}" for k, v in c.items() if k != "skipped"))
        if "skipped" in c:
            print(f"  {src} skipped: " + ", ".join(f"{k} {v}" for k, v in c["skipped"].items()))
    if share is not None:
        m, h = summary["mix"], summary["sharegpt_heldout"]
        print(
            f"training mix: {m['examples']} examples, {m['block']} with a block ({m['block_share']:.1%}, "
            f"target {args.block_share:.0%}), {m['serial']} serial ({m['serial_kept']} of "
            f"{m['serial_available']} ShareGPT serial answers kept)"
        )
        print(
            f"held-out ShareGPT: {h['written']} examples, {h['mix']['block']} with a block: "
            + " -> ".join(f"{k} {v}" for k, v in h.items() if isinstance(v, int) and k != "written")
        )
    files = "train.jsonl, heldout.jsonl, extracted.jsonl" + (
        ", heldout_sharegpt.jsonl" if share else ""
    )
    print(f"wrote {out}/{files}, summary.json")
    return 0


def _sharegpt(args, convs, mtbench, pipe, make_judge, others: list) -> tuple:
    """(training examples down-sampled to the mix, held-out examples, skips by source, mix facts).
    The held-out examples are one seeded turn of each eval chat, through their own pipeline so that
    the training stage counts stay the training set's."""
    import random
    from collections import Counter

    from . import pipeline, sharegpt

    budget = sharegpt.budget(args.max_len)
    skips = {
        "sharegpt": Counter(dict.fromkeys(sharegpt.SKIPS, 0)),
        "sharegpt-heldout": Counter(dict.fromkeys(sharegpt.SKIPS, 0)),
    }
    items = []
    for t in sharegpt.turns(convs, "train", args.seed, mtbench, skips["sharegpt"]):
        if args.sharegpt_turns and len(items) >= args.sharegpt_turns:
            break
        items.append(t)
    exs = sharegpt.examples(pipe, items, budget, "sharegpt", skips["sharegpt"])
    blocks = sum(bool(e.blocks) for e in others)
    kept, share = sharegpt.down_sample(
        exs, args.block_share, (blocks, len(others) - blocks), args.seed
    )
    per_chat: dict[str, list] = {}
    seen = sharegpt.user_texts(convs, "train")
    for t in sharegpt.turns(
        convs, "eval", args.seed, mtbench, skips["sharegpt-heldout"], exclude=seen
    ):
        if budget.fits_plain(t):
            per_chat.setdefault(t.chat_id, []).append(t)
        else:
            skips["sharegpt-heldout"]["too_long"] += 1
    rng = random.Random(args.seed)
    chosen = [rng.choice(ts) for ts in per_chat.values()]
    held_pipe = pipeline.Pipeline(
        make_judge(), count=pipe.count, votes=pipe.votes, unanimous=pipe.unanimous
    )
    held, i = [], 0
    # only as many as asked go through the stages
    while len(held) < args.sharegpt_heldout and i < len(chosen):
        step = args.sharegpt_heldout - len(held)
        held += sharegpt.examples(
            held_pipe, chosen[i : i + step], budget, "sharegpt-heldout", skips["sharegpt-heldout"]
        )
        i += step
    share["heldout_stages"] = held_pipe.by_source.get("sharegpt-heldout", {})
    return kept, held, {k: dict(v) for k, v in skips.items()}, share
