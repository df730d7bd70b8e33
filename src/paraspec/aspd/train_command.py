"""`paraspec aspd train | export | eval`: the flags and the glue (model loading, adapters, export).

train: the bundled model (GGUF dequantised to fp32) + the six markup tokens, LoRA fine-tuned on
data/aspd/train.jsonl (+ the extracted examples that fit), saved to adapters/{variant}.safetensors.
The control ("control") is the same recipe on the same examples' plain text with a causal mask.
export: base weights + merged adapter -> a Hugging Face folder (config.json, model.safetensors,
tokenizer.json with the six tokens, tokenizer_config.json, generation_config.json) for --model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from .paths import ADAPTER_DIR, DATA_DIR, EXPORT_DIR

VARIANTS = ("aspd", "control")


def add_parsers(s) -> None:
    t = s.add_parser(
        "train", help="LoRA fine-tune of the bundled model for ASPD and/or the plain-text control"
    )
    t.add_argument("--variant", choices=VARIANTS + ("both",), default="both")
    t.add_argument(
        "--data",
        default=str(DATA_DIR),
        help='folder of build-data\'s JSONL files, or your own JSONL file of {"prompt": ..., "answer": ...} '
        "lines (run through build-data's extraction stages)",
    )
    t.add_argument(
        "--out", default=str(ADAPTER_DIR), help="where adapters/<variant>.safetensors go"
    )
    t.add_argument(
        "--examples", type=int, default=0, help="use the first N training examples (0: all)"
    )
    t.add_argument(
        "--offset", type=int, default=0, help="skip the first N training examples (a continued run)"
    )
    t.add_argument(
        "--init",
        action="store_true",
        help="start from this variant's adapter in --out (continue a run)",
    )
    t.add_argument(
        "--no-extracted", action="store_true", help="train on the synthetic examples only"
    )
    t.add_argument(
        "--epochs", type=float, default=1.0, help="passes over the data when --steps is 0"
    )
    t.add_argument(
        "--steps",
        type=int,
        default=0,
        help="optimizer steps (0: epochs * examples / batch); "
        "both variants of one recipe take the same steps",
    )
    t.add_argument("--seed", type=int, default=0, help="LoRA init and batch order")
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--rank", type=int, default=8)
    t.add_argument("--alpha", type=float, default=16.0)
    t.add_argument(
        "--max-len", type=int, default=384, help="drop examples longer than this many tokens"
    )
    t.add_argument(
        "--max-minutes",
        type=float,
        default=0.0,
        help="wall-clock cap per variant (default 0: none; a cap makes the adapter depend on the machine)",
    )
    t.add_argument(
        "--dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: matmuls in bfloat16 (fast on CPUs with AVX512_BF16 or AMX; not bit-identical "
        "to fp32, which the committed adapters' recipe uses)",
    )
    t.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    t.add_argument(
        "--model", default="default", help="base model (default: the bundled SmolLM2-135M)"
    )
    t.set_defaults(func=train_main)
    e = s.add_parser(
        "export", help="merge an adapter into a Hugging Face folder that --model loads"
    )
    e.add_argument("--variant", choices=VARIANTS, default="aspd")
    e.add_argument(
        "--adapter", default=None, help="adapter file (default: the committed one for --variant)"
    )
    e.add_argument("--out", default=None, help=f"folder (default: {EXPORT_DIR}/<variant>)")
    e.add_argument(
        "--model",
        default=None,
        help="the base model the adapter was trained on (default: the one its training recorded, "
        "else the bundled one)",
    )
    e.set_defaults(func=export_main)


def base(model: str = "default"):
    """(loaded fp32 model with the markup rows added, tokenizer, MarkupIds, base vocab size).
    A model the training forward cannot represent is refused here (trainable.py)."""
    import torch

    from ..model.loader import load_model
    from ..model.tokenizer import Tokenizer
    from .markup import add_markup_tokens
    from .trainable import check_trainable

    loaded = load_model(model, torch.float32)
    check_trainable(loaded)
    tok = Tokenizer.from_source(loaded.tokenizer_source)
    n_base = loaded.weights["tok_embeddings"].shape[0]
    ids = add_markup_tokens(tok, loaded.weights, loaded)
    return loaded, tok, ids, n_base


def train_main(args: argparse.Namespace) -> int:
    import torch

    from ..errors import ConfigError
    from . import data, train
    from .lora import save_adapter

    if args.threads < 1 or args.batch < 1 or args.rank < 1 or args.epochs <= 0 or args.steps < 0:
        raise ConfigError("--threads, --batch, --rank must be >= 1, --epochs > 0 and --steps >= 0")
    torch.set_num_threads(args.threads)
    if Path(args.data).is_file():
        examples = user_examples(Path(args.data))
    else:
        examples = data.read_jsonl(Path(args.data) / "train.jsonl")
        extracted = Path(args.data) / "extracted.jsonl"
        if not args.no_extracted and extracted.is_file():
            examples += data.read_jsonl(extracted)
    examples = (
        examples[args.offset : args.offset + args.examples]
        if args.examples
        else examples[args.offset :]
    )
    if not examples:
        raise ConfigError(f"--data {args.data}: no training examples (after --offset / --examples)")
    data_digest = hashlib.sha256(
        "".join(json.dumps(e.to_json(), sort_keys=True) for e in examples).encode()
    ).hexdigest()[:16]
    loaded, tok, ids, n_base = base(args.model)
    # Both variants train on the same examples in the same order: drop those whose ASPD encoding
    # (the longer one: markup and restated titles) does not fit, for the control too.
    max_len = min(args.max_len, loaded.args.max_seq_len)
    examples = [e for e in examples if len(train.encode(e, tok, ids).ids) <= max_len]
    if not examples:
        raise ConfigError(f"--data {args.data}: no example fits --max-len {max_len}")
    results = {}
    for variant in VARIANTS if args.variant == "both" else (args.variant,):
        torch.manual_seed(args.seed)
        weights = loaded.weights if variant == "aspd" else without_markup(loaded.weights, n_base)
        model = train.TrainModel(loaded.args, weights, n_base, rank=args.rank, alpha=args.alpha)
        previous = None
        if args.init:
            from .lora import load_adapter

            tensors, previous = load_adapter(Path(args.out) / f"{variant}.safetensors")
            model.load_adapter(tensors)
        enc = [train.encode(e, tok, ids if variant == "aspd" else None) for e in examples]
        cfg = train.TrainConfig(
            epochs=args.epochs,
            steps=args.steps,
            batch=args.batch,
            lr=args.lr,
            max_len=args.max_len,
            max_minutes=args.max_minutes,
            seed=args.seed,
            dtype=args.dtype,
        )
        print(
            f"[{variant}] {len(enc)} examples, {sum(len(e.ids) for e in enc)} tokens, "
            f"{args.threads} thread(s)",
            flush=True,
        )
        stats = train.fit(model, enc, cfg, log=lambda m, v=variant: print(f"[{v}] {m}", flush=True))
        meta = {
            "variant": variant,
            "base_model": loaded.name,
            "base_vocab": n_base,
            "rank": args.rank,
            "alpha": args.alpha,
            "tokens": "markup" if variant == "aspd" else "none",
            "lr": args.lr,
            "epochs": args.epochs,
            "steps": args.steps,
            "seed": args.seed,
            "dtype": args.dtype,
            "batch": args.batch,
            "offset": args.offset,
            "examples": args.examples,
            "data_sha256": data_digest,
            "commit": source_commit(),
            "train": stats,
            "previous_runs": ((previous or {}).get("previous_runs", []) + [previous["train"]])
            if previous
            else [],
            "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        if args.model != "default":  # what export and eval load the base from
            meta["model"] = args.model
        out = Path(args.out) / f"{variant}.safetensors"
        save_adapter(out, model.adapter_tensors(), meta)
        results[variant] = stats
        print(
            f"[{variant}] saved {out} ({out.stat().st_size / 1e6:.1f} MB): {json.dumps(stats)}",
            flush=True,
        )
    return 0


def user_examples(path: Path) -> list:
    """A JSONL file of the user's {"prompt", "answer"} pairs through build-data's extraction
    stages (rule judge): answers with lists or sections the stages accept become blocks, the
    others stay serial examples, which teach the model when not to branch."""
    from . import judge, pipeline, sources

    pipe = pipeline.Pipeline(judge.RuleJudge(), count=sources.token_counter(None))
    examples = pipe.run(sources.user_answers(path, "--data"), "user", keep_serial=True)
    counts = pipe.by_source["user"]
    print(
        f"--data {path}: "
        + " -> ".join(f"{k} {v}" for k, v in counts.items())
        + f"; {sum(bool(e.blocks) for e in examples)} with blocks, {sum(not e.blocks for e in examples)} serial",
        flush=True,
    )
    return examples


def source_commit() -> str:
    """The git commit the trainer ran from ("+dirty" when src/ had changes, new files included),
    or "unknown" outside a checkout: an adapter names the code that made it."""
    from ..source_version import git_commit

    return git_commit("src", untracked=True) or "unknown"


def without_markup(weights: dict, n_base: int) -> dict:
    """The weights with the markup rows cut from the embedding (and an untied head): the control's."""
    return {
        **weights,
        **{k: weights[k][:n_base] for k in ("tok_embeddings", "lm_head") if k in weights},
    }


def merged_weights(loaded, n_base: int, adapter: dict, meta: dict) -> dict:
    """Base weights with the adapter folded in: its new rows (none for the control) after the
    base vocabulary in the embedding and an untied head, LoRA's B A added to each target."""
    import torch

    from ..errors import ConfigError

    weights = dict(loaded.weights)
    scale = meta["alpha"] / meta["rank"]
    for name, key in (("tok_embeddings", "new_embed"), ("lm_head", "new_head")):
        if name not in weights:
            if key in adapter:
                raise ConfigError(
                    f"adapter has {key} but this model has no {name} (a tied head): it was "
                    "trained on another model; export it with that --model"
                )
            continue
        if key not in adapter:
            raise ConfigError(
                f"adapter lacks {key}, the new rows of this model's {name}: trained on another model "
                "(or on this untied one before its head's rows were trained); retrain it with `paraspec aspd train`"
            )
        new = adapter[key]
        if key == "new_head" and new.shape != adapter["new_embed"].shape:
            raise ConfigError(
                f"adapter new_head has shape {tuple(new.shape)} but new_embed {tuple(adapter['new_embed'].shape)}"
            )
        weights[name] = (
            torch.cat([weights[name][:n_base].float(), new])
            if new.numel()
            else weights[name][:n_base]
        )
    for key, a in adapter.items():
        if key.endswith(".lora_A"):
            name = key[: -len(".lora_A")]
            weights[name] = weights[name].float() + (adapter[name + ".lora_B"] @ a) * scale
    return weights


def export_main(args: argparse.Namespace) -> int:
    adapter = Path(args.adapter) if args.adapter else ADAPTER_DIR / f"{args.variant}.safetensors"
    out = export(adapter, Path(args.out) if args.out else EXPORT_DIR / args.variant, args.model)
    print(f"wrote {out} (load it with --model {out})")
    return 0


def export(adapter: Path, out: Path, model: str | None = None) -> Path:
    """The base model (`model`, else the one the adapter's training recorded, else the bundled
    one) with the adapter merged, written as a Hugging Face folder."""
    from .hf_folder import write_hf_folder
    from .lora import load_adapter

    tensors, meta = load_adapter(adapter)
    model = model or meta.get("model", "default")
    loaded, tok, ids, n_base = base(model)
    weights = merged_weights(loaded, n_base, tensors, meta)  # the control has no markup rows
    write_hf_folder(
        out, loaded.args, weights, loaded.tokenizer_source, with_markup=meta.get("tokens") != "none"
    )
    return out
