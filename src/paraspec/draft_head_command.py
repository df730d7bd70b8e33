"""`paraspec draft-head`: train a draft head for a model (draft_head_train.py) and write its file.

Nothing here loads torch until the command runs: `paraspec --help` stays quick.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "draft-head",
        help="train a draft head for a model on its own hidden states (plugin_params.draft_head)",
        description="Train a draft head for MODEL on this CPU: ShareGPT's answers and the "
        "model's own, for their hidden states (about 1.6 hours for the 1.5B on 2 cores).",
    )
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="the model it drafts for")
    p.add_argument(
        "--out",
        help="the head's file (default: ~/.cache/paraspec/heads/<model file>.pt, where "
        'plugin_params "draft_head": "auto" finds it)',
    )
    p.add_argument("--work", help="folder for the stages (default: beside --out)")
    p.add_argument("--reference-tokens", type=int, default=90000, help="rows of ShareGPT answers")
    p.add_argument(
        "--self-tokens", type=int, default=300000, help="rows of the model's own answers"
    )
    p.add_argument("--vocab", type=int, default=8192, help="tokens the head can draft")
    p.add_argument("--mlp", type=int, default=2048, help="the head's MLP width (0: none)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import torch

    from . import LLM
    from .draft_heads import trained_head_path
    from .draft_head_train import own_answers, reference_features, train
    from .errors import ConfigError

    for name in ("reference_tokens", "self_tokens", "vocab", "epochs"):
        if getattr(args, name) < (1 if name in ("vocab", "epochs") else 0):
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    if args.mlp < 0:
        raise ConfigError("--mlp must be 0 (no MLP) or a positive width")
    if args.reference_tokens + args.self_tokens == 0:
        raise ConfigError("--reference-tokens and --self-tokens are both 0: nothing to train on")
    if args.threads:
        torch.set_num_threads(args.threads)
    llm = LLM(model=args.model)
    out = Path(args.out).expanduser() if args.out else trained_head_path(llm.model_name)
    work = Path(args.work).expanduser() if args.work else out.with_suffix(".work")
    work.mkdir(parents=True, exist_ok=True)

    def stage(name: str, make):
        path = work / name
        if path.exists():
            return torch.load(path)
        print(f"{name}:", flush=True)
        value = make()
        torch.save(value, path)
        return value

    data = []
    if args.reference_tokens:
        data += stage(
            f"reference-{args.reference_tokens}.pt",
            lambda: reference_features(llm, args.reference_tokens),
        )
    if args.self_tokens:
        data += own_answers(llm, args.self_tokens, stage)
    print("training:", flush=True)
    ck = train(llm, data, args.vocab, args.mlp, args.epochs)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    torch.save(ck, tmp)
    os.replace(tmp, out)
    auto = out == trained_head_path(llm.model_name)
    print(
        f"wrote {out} ({ck['rows']} rows); use it with plugin_params "
        f'{{"plugin_type": "hybrid", "draft_head": "{"auto" if auto else out}"}}'
    )
    return 0
