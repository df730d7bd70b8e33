"""`paraspec aspd build-data | train | export | eval`: ASPD's data, fine-tuning and evaluation.

build-data writes data/aspd/{train,heldout,extracted}.jsonl and summary.json (stage counts);
train fine-tunes LoRA adapters (ASPD and the plain-text control) into src/paraspec/aspd/adapters;
export merges one into a Hugging Face folder that --model loads; eval compares the two.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .paths import DATA_DIR


def add_parser(sub) -> None:
    p = sub.add_parser("aspd", help="ASPD (adaptive serial-parallel decoding): data, training, evaluation")
    s = p.add_subparsers(dest="aspd_command", required=True)
    b = s.add_parser("build-data", help="synthetic tasks + structure extracted from plain answers -> JSONL")
    b.add_argument("--out", default=str(DATA_DIR), help="output folder (default: data/aspd)")
    b.add_argument("--train", type=int, default=1200, help="synthetic training items")
    b.add_argument("--heldout", type=int, default=120, help="held-out synthetic items (another seed)")
    b.add_argument("--seed", type=int, default=0, help="training seed; held-out uses seed + 1000")
    b.add_argument("--sources", default="packages", help="comma list of extraction sources: packages, model")
    b.add_argument("--judge", choices=("rule", "llm", "rule+llm"), default="rule", help="extraction judge")
    b.add_argument("--votes", type=int, default=3, help="judge votes per decision (unanimous by default)")
    b.add_argument("--majority", action="store_true", help="accept on a majority of votes instead of all")
    b.add_argument("--model-answers", type=int, default=152,
                   help="bench chat prompts the bundled model answers (source 'model'; the eval's 20 left out)")
    b.add_argument("--user-data", default=None, metavar="FILE.jsonl",
                   help='your own {"prompt": ..., "answer": ...} lines, extracted as source "user" '
                        "(answers without an accepted block are kept as serial examples)")
    b.set_defaults(func=build_data_main)
    from . import evaluate, train_command   # train / export / eval flags live next to their code
    train_command.add_parsers(s)
    evaluate.add_parser(s)
    p.set_defaults(func=lambda a: a.func(a))


def build_data_main(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from . import data, judge, pipeline, sources, synth

    for name in ("train", "heldout", "votes", "model_answers"):
        if getattr(args, name) < (1 if name == "votes" else 0):
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {1 if name == 'votes' else 0}")
    wanted = [s.strip() for s in args.sources.split(",") if s.strip()]
    bad = [s for s in wanted if s not in ("packages", "model")]
    if bad:
        raise ConfigError(f"--sources: unknown source {bad[0]!r}; use packages, model (comma separated)")
    out = Path(args.out)
    user = sources.user_answers(args.user_data) if args.user_data else None   # bad lines fail before any work
    train = synth.generate(args.train, args.seed)
    heldout = synth.generate(args.heldout, args.seed + 1000, exclude={e.prompt for e in train}, split="heldout")
    llm = None
    if "model" in wanted or args.judge != "rule":
        from ..api import LLM
        llm = LLM("default")
    the_judge = {"rule": judge.RuleJudge, "llm": lambda: judge.LLMJudge(llm),
                 "rule+llm": lambda: judge.BothJudges(judge.LLMJudge(llm))}[args.judge]()
    count = sources.token_counter(llm)
    pipe = pipeline.Pipeline(the_judge, count=count, votes=args.votes, unanimous=not args.majority)
    extracted = []
    if "packages" in wanted:
        extracted += pipe.run(sources.package_answers(count=count), "packages")
    if "model" in wanted:
        # kept serial where no block is accepted: the base model's own answers regularise the fine-tune
        extracted += pipe.run(sources.model_answers(llm, args.model_answers), "model", keep_serial=True)
    if user is not None:
        # the user's own answers are training data as given: the ones that stay serial teach when not to branch
        extracted += pipe.run(user, "user", keep_serial=True)
    written = data.write_jsonl(out / "extracted.jsonl", extracted)
    by_source = {src: {**c, "written": sum(e.source == src for e in extracted)} for src, c in pipe.by_source.items()}
    summary = {
        "synthetic": {"train": data.write_jsonl(out / "train.jsonl", train),
                      "heldout": data.write_jsonl(out / "heldout.jsonl", heldout),
                      "families": {f: sum(e.family == f for e in train) for f in synth.FAMILIES}},
        "extraction": {"judge": the_judge.name, "votes": args.votes, "unanimous": not args.majority,
                       "sources": list(by_source), "stages": pipe.counts, "by_source": by_source,
                       "written": written},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"synthetic: {len(train)} train, {len(heldout)} held-out ({summary['synthetic']['families']})")
    print("extraction (" + the_judge.name + "): " + " -> ".join(f"{k} {v}" for k, v in pipe.counts.items()))
    for src, c in by_source.items():
        print(f"  {src}: " + " -> ".join(f"{k} {v}" for k, v in c.items()))
    print(f"wrote {out}/train.jsonl, heldout.jsonl, extracted.jsonl, summary.json")
    return 0
