"""`paraspec aspd eval [--quick]`: ASPD against a matched control, on held-out synthetic tasks and on
real prompts.

The control is the same base model fine-tuned by the same recipe for the same steps on the same
answers, written as plain text with each part's label kept as its line's prefix (data.labelled_text),
so the two differ only in ASPD's markup, mask and positions. Decoders, greedy, one request at a
time (batch 1), taking turns per prompt so that load changes on a shared machine hit all alike:
- control / control+drafts: the control decoded autoregressively / with memory_decoding drafts;
- aspd / aspd+drafts: the ASPD model with plugin "aspd" (serial segments AR, branches in parallel),
  without / with the same memory_decoding drafts (serial segments and branches);
- base (real prompts only): the untuned bundled model, whose answers are the reference.
Two sets:
- heldout: synthetic tasks whose countries, questions and arithmetic parts training never saw
  (synth split "heldout"); accuracy by the exact checker on the engine's `.text` (what a user
  reads), per family and overall;
- real: the bench's chat prompts and eval_prompts.INSTRUCTIONS, which have no parallel structure
  by construction; mtbench (--mtbench-n): MT-Bench first turns. Reference: the base model's
  answer to the same prompt;
- sharegpt (--sharegpt-n): build-data's held-out ShareGPT turns, decoded with their history.
  Reference: the turn's own answer.
Quality on a real set: ROUGE-L of each answer against its reference, paired ASPD - control, split
by whether the reference has a list (eval_prompts.has_list); the prompt's exact checks where it has
them; loops (eval_stats.degenerate); how often ASPD opened a block where the reference has no
list. The speed figures are split by whether ASPD opened a block on the prompt.
Speed: `speedup` is the control's seconds per answer token over ASPD's (tokens of `.text` in the
base tokenizer; a throughput ratio, fair where answers differ in length), `speedup_with_drafts`
the same for control+drafts over aspd+drafts (both with the same drafter: the gain ASPD adds to
drafting), `latency_ratio` the control's total wall-clock over ASPD's. `_cpu`: process CPU time
(time.process_time), which another process on a shared machine does not inflate. Every figure has
a 90 % bootstrap interval over prompts (eval_stats). text_mismatches counts ASPD answers whose
`.text` is not markup.to_plain of the engine's raw markup (it must be 0: stream.py).
Models are the committed adapters merged into cached Hugging Face folders (export), rebuilt when
an adapter changes. The report's figures are computed in eval_summary.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from .eval_summary import brief_report, summarize, summarize_real
from .paths import ADAPTER_DIR, DATA_DIR, EXPORT_DIR

MODES = ("control", "control+drafts", "aspd", "aspd+drafts")
REAL_MODES = ("base",) + MODES
DRAFTS = {"plugin_type": "memory_decoding"}
ASPD = {"plugin_type": "aspd"}
ASPD_DRAFTS = {"plugin_type": "aspd", "drafter": DRAFTS}
PLUGINS = {
    "base": None,
    "control": None,
    "control+drafts": DRAFTS,
    "aspd": None,
    "aspd+drafts": ASPD_DRAFTS,
}


def add_parser(s) -> None:
    e = s.add_parser(
        "eval", help="ASPD vs the matched control: accuracy, quality, forward passes, speed"
    )
    e.add_argument(
        "--quick",
        action="store_true",
        help="24 held-out tasks and 19 real prompts; print one JSON line",
    )
    e.add_argument(
        "--n",
        type=int,
        default=-1,
        help="held-out tasks (default: all, or 24 with --quick; 0: none)",
    )
    e.add_argument(
        "--real-n",
        type=int,
        default=-1,
        help="real prompts (default: all 76, or 19 with --quick; 0: none)",
    )
    e.add_argument(
        "--sharegpt-n",
        type=int,
        default=0,
        help="held-out ShareGPT turns, scored against their own answers (default 0; "
        "build-data writes them)",
    )
    e.add_argument("--sharegpt-data", default=str(DATA_DIR / "heldout_sharegpt.jsonl"))
    e.add_argument(
        "--mtbench-n",
        type=int,
        default=0,
        help="MT-Bench first turns, spread over its categories (default 0; `paraspec fetch mtbench`)",
    )
    e.add_argument(
        "--open-threshold",
        type=float,
        default=0.0,
        help="ASPD's plugin_params.open_threshold (default 0: the model opens blocks as it draws)",
    )
    e.add_argument("--data", default=str(DATA_DIR / "heldout.jsonl"))
    e.add_argument("--adapters", default=str(ADAPTER_DIR))
    e.add_argument(
        "--cache", default=str(EXPORT_DIR), help="where the merged model folders are cached"
    )
    e.add_argument(
        "--aspd-model", default=None, help="an exported ASPD folder (instead of the adapters)"
    )
    e.add_argument(
        "--control-model", default=None, help="an exported control folder (instead of the adapters)"
    )
    e.add_argument(
        "--base-model",
        default="default",
        help="the reference for real prompts (default: the bundled model)",
    )
    e.add_argument("--max-tokens", type=int, default=256)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--out", default=None, help="also write the full report (JSON) here")
    e.set_defaults(func=eval_main)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def model_folder(variant: str, adapters: Path, cache: Path) -> Path:
    """The merged folder of adapters/<variant>.safetensors, exported again if the adapter changed
    (under a lock: processes that ask at once, as test workers do, export it once)."""
    import fcntl

    from .train_command import export

    adapter = adapters / f"{variant}.safetensors"
    folder = cache / variant
    stamp = folder / "adapter.sha256"
    digest = _sha(adapter) if adapter.is_file() else None
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{variant}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if digest is None or not stamp.is_file() or stamp.read_text() != digest:
            export(adapter, folder)
            stamp.write_text(digest or "")
    return folder


def heldout() -> list:
    """build-data's held-out split, regenerated (deterministic: seed 1000, the held-out tables and
    parts, no prompt of seed 0's 1200 training items)."""
    from . import synth

    return synth.generate(
        120, 1000, exclude={e.prompt for e in synth.generate(1200, 0)}, split="heldout"
    )


def _decode(llms: dict, plugins: dict, mode: str, ex, params, count) -> dict:
    from .markup import parse, to_plain

    llm = llms[
        "aspd" if mode.startswith("aspd") else "control" if mode.startswith("control") else "base"
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    out = llm.chat(ex.messages, params, plugins[mode])[0]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    raw, text = out.stats.get("aspd_raw_text"), out.outputs[0].text
    blocks = [seg for seg in parse(raw) if seg.parallel] if raw else []
    return {
        "id": ex.id,
        "family": ex.family,
        "wall_s": wall,
        "cpu_s": cpu,
        "forward_passes": out.stats.get("forward_passes", 0),
        "answer_tokens": len(count(text)),
        "blocks": len(blocks),
        "branches": sum(len(b.branches) for b in blocks),
        "text": text,
        "raw": raw,
        "text_mismatch": raw is not None and to_plain(raw) != text,
    }


def run_eval(
    aspd_model: str,
    control_model: str,
    examples: list,
    max_tokens: int = 256,
    threads: int = 1,
    log=None,
    real: dict | None = None,
    base_model: str = "default",
    open_threshold: float = 0.0,
) -> dict:
    """Every decoder on every held-out task (`examples`), then on every prompt of each real set
    (`real`: set name -> examples; report[name] for each)."""
    import torch

    from ..api import LLM
    from ..sampling.params import SamplingParams
    from . import eval_prompts, synth

    torch.set_num_threads(threads)
    aspd = {**ASPD, "open_threshold": open_threshold} if open_threshold else ASPD
    plugins = {**PLUGINS, "aspd+drafts": {**ASPD_DRAFTS, **aspd}}
    llms = {"control": LLM(control_model), "aspd": LLM(aspd_model, plugin_params=aspd)}
    real = real or {}
    if any(eval_prompts.reference(ex) is None for exs in real.values() for ex in exs):
        llms["base"] = LLM(base_model)
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    count = llms["control"].tokenizer.encode
    first = (examples or [ex for exs in real.values() for ex in exs])[0]
    for llm in llms.values():  # the first call pays one-time costs (kernel packing, caches)
        llm.chat(
            [{"role": "user", "content": first.prompt}], SamplingParams(temperature=0, max_tokens=4)
        )
    rows = {m: [] for m in MODES}
    for i, ex in enumerate(examples):
        for mode in MODES:
            r = _decode(llms, plugins, mode, ex, params, count)
            r["ok"] = synth.check(ex, r["text"])
            rows[mode].append(r)
        if log:
            log(
                f"heldout {i + 1}/{len(examples)} "
                + " ".join(
                    f"{m}:{'ok' if rows[m][-1]['ok'] else 'x'} {rows[m][-1]['wall_s']:.2f}s"
                    for m in MODES
                )
            )
    report = summarize(rows, threads) if examples else {"n": 0, "threads": threads}
    for name, exs in (real or {}).items():
        if exs:
            report[name] = summarize_real(_real_rows(llms, plugins, name, exs, params, count, log))
    n = llms["aspd"].numerics
    report["open_threshold"] = open_threshold
    report["numerics"] = f"{n.dtype}" + (f"+{n.quantization}" if n.quantization else "")
    return report


def _real_rows(llms: dict, plugins: dict, name: str, exs: list, params, count, log) -> dict:
    """Every decoder on every prompt of one real set, scored against its reference: the example's
    own answer where it has one (ShareGPT), else the base model's answer (which is then decoded)."""
    from . import eval_prompts
    from .eval_stats import degenerate, rouge_l

    modes = MODES if all(eval_prompts.reference(ex) is not None for ex in exs) else REAL_MODES
    rows = {m: [] for m in modes}
    for i, ex in enumerate(exs):
        for mode in modes:
            r = _decode(llms, plugins, mode, ex, params, count)
            r["ok"] = eval_prompts.check(ex, r["text"], r["branches"])
            r["loop"] = degenerate(r["text"])
            rows[mode].append(r)
        ref = eval_prompts.reference(ex)
        ref = rows["base"][-1]["text"] if ref is None else ref
        for mode in modes:
            rows[mode][-1]["overlap"] = rouge_l(rows[mode][-1]["text"], ref)
            rows[mode][-1]["reference_list"] = eval_prompts.has_list(ref)
        if log:
            log(
                f"{name} {i + 1}/{len(exs)} "
                + " ".join(
                    f"{m}:{rows[m][-1]['overlap']:.2f} {rows[m][-1]['wall_s']:.2f}s" for m in modes
                )
                + f" blocks {rows['aspd'][-1]['blocks']}"
            )
    return rows


def eval_main(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from . import eval_prompts
    from .data import read_jsonl

    if (
        min(args.sharegpt_n, args.mtbench_n) < 0
        or args.max_tokens < 1
        or args.threads < 1
        or min(args.n, args.real_n) < -1
    ):
        raise ConfigError(
            "--n, --real-n, --sharegpt-n and --mtbench-n must be >= 0, "
            "--max-tokens and --threads >= 1"
        )
    examples = read_jsonl(args.data) if Path(args.data).is_file() else heldout()
    examples = examples[: args.n if args.n >= 0 else 24 if args.quick else len(examples)]
    real = eval_prompts.real_prompts()
    real = (
        real[::4]
        if args.quick and args.real_n < 0
        else real[: args.real_n]
        if args.real_n >= 0
        else real
    )
    sets = {
        "real": real,
        "sharegpt": eval_prompts.sharegpt_heldout(args.sharegpt_data, args.sharegpt_n)
        if args.sharegpt_n
        else [],
        "mtbench": eval_prompts.mtbench_first_turns(args.mtbench_n) if args.mtbench_n else [],
    }
    if not examples and not any(sets.values()):
        raise ConfigError(
            f"{args.data} has no examples and every real set is empty (--real-n 0); "
            "run `paraspec aspd build-data`"
        )
    adapters, cache = Path(args.adapters), Path(args.cache)
    aspd = args.aspd_model or str(model_folder("aspd", adapters, cache))
    control = args.control_model or str(model_folder("control", adapters, cache))
    report = run_eval(
        aspd,
        control,
        examples,
        args.max_tokens,
        args.threads,
        log=None if args.quick else print,
        real=sets,
        base_model=args.base_model,
        open_threshold=args.open_threshold,
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    brief = brief_report(report)
    print(json.dumps(brief) if args.quick else json.dumps(brief, indent=1))
    return 0
