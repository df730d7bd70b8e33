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
an adapter changes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from .paths import ADAPTER_DIR, DATA_DIR, EXPORT_DIR

MODES = ("control", "control+drafts", "aspd", "aspd+drafts")
REAL_MODES = ("base",) + MODES
REAL_SETS = ("real", "sharegpt", "mtbench")      # report keys of the real prompt sets
DRAFTS = {"plugin_type": "memory_decoding"}
ASPD = {"plugin_type": "aspd"}
ASPD_DRAFTS = {"plugin_type": "aspd", "drafter": DRAFTS}
PLUGINS = {"base": None, "control": None, "control+drafts": DRAFTS, "aspd": None, "aspd+drafts": ASPD_DRAFTS}


def add_parser(s) -> None:
    e = s.add_parser("eval", help="ASPD vs the matched control: accuracy, quality, forward passes, speed")
    e.add_argument("--quick", action="store_true", help="24 held-out tasks and 19 real prompts; print one JSON line")
    e.add_argument("--n", type=int, default=-1, help="held-out tasks (default: all, or 24 with --quick; 0: none)")
    e.add_argument("--real-n", type=int, default=-1, help="real prompts (default: all 76, or 19 with --quick; 0: none)")
    e.add_argument("--sharegpt-n", type=int, default=0,
                   help="held-out ShareGPT turns, scored against their own answers (default 0; "
                        "build-data writes them)")
    e.add_argument("--sharegpt-data", default=str(DATA_DIR / "heldout_sharegpt.jsonl"))
    e.add_argument("--mtbench-n", type=int, default=0,
                   help="MT-Bench first turns, spread over its categories (default 0; `paraspec fetch mtbench`)")
    e.add_argument("--open-threshold", type=float, default=0.0,
                   help="ASPD's plugin_params.open_threshold (default 0: the model opens blocks as it draws)")
    e.add_argument("--data", default=str(DATA_DIR / "heldout.jsonl"))
    e.add_argument("--adapters", default=str(ADAPTER_DIR))
    e.add_argument("--cache", default=str(EXPORT_DIR), help="where the merged model folders are cached")
    e.add_argument("--aspd-model", default=None, help="an exported ASPD folder (instead of the adapters)")
    e.add_argument("--control-model", default=None, help="an exported control folder (instead of the adapters)")
    e.add_argument("--base-model", default="default", help="the reference for real prompts (default: the bundled model)")
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
    return synth.generate(120, 1000, exclude={e.prompt for e in synth.generate(1200, 0)}, split="heldout")


def _decode(llms: dict, plugins: dict, mode: str, ex, params, count) -> dict:
    from .markup import parse, to_plain
    llm = llms["aspd" if mode.startswith("aspd") else "control" if mode.startswith("control") else "base"]
    t0, c0 = time.perf_counter(), time.process_time()
    out = llm.chat(ex.messages, params, plugins[mode])[0]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    raw, text = out.stats.get("aspd_raw_text"), out.outputs[0].text
    blocks = [seg for seg in parse(raw) if seg.parallel] if raw else []
    return {"id": ex.id, "family": ex.family, "wall_s": wall, "cpu_s": cpu,
            "forward_passes": out.stats.get("forward_passes", 0), "answer_tokens": len(count(text)),
            "blocks": len(blocks), "branches": sum(len(b.branches) for b in blocks), "text": text, "raw": raw,
            "text_mismatch": raw is not None and to_plain(raw) != text}


def run_eval(aspd_model: str, control_model: str, examples: list, max_tokens: int = 256,
             threads: int = 1, log=None, real: dict | None = None, base_model: str = "default",
             open_threshold: float = 0.0) -> dict:
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
    for llm in llms.values():      # the first call pays one-time costs (kernel packing, caches)
        llm.chat([{"role": "user", "content": first.prompt}], SamplingParams(temperature=0, max_tokens=4))
    rows = {m: [] for m in MODES}
    for i, ex in enumerate(examples):
        for mode in MODES:
            r = _decode(llms, plugins, mode, ex, params, count)
            r["ok"] = synth.check(ex, r["text"])
            rows[mode].append(r)
        if log:
            log(f"heldout {i + 1}/{len(examples)} " + " ".join(
                f"{m}:{'ok' if rows[m][-1]['ok'] else 'x'} {rows[m][-1]['wall_s']:.2f}s" for m in MODES))
    report = summarize(rows, threads) if examples else {"n": 0, "threads": threads}
    for name, exs in (real or {}).items():
        if exs:
            report[name] = summarize_real(_real_rows(llms, plugins, name, exs, params, count, log))
    n = llms["aspd"].numerics
    report["open_threshold"] = open_threshold
    report["numerics"] = f"{n.dtype}" + (f"+{n.quantization}" if n.quantization else "")
    return report


def _mode_summary(rs: list[dict]) -> dict:
    from .eval_stats import mean_ci, ratio_ci
    scored = [r for r in rs if r["ok"] is not None]
    tokens = sum(r["answer_tokens"] for r in rs)
    return {"accuracy": mean_ci([float(r["ok"]) for r in scored]),
            "by_family": {f: mean_ci([float(r["ok"]) for r in scored if r["family"] == f])
                          for f in sorted({r["family"] for r in scored})},
            "forward_passes_per_token": ratio_ci([r["forward_passes"] for r in rs], [r["answer_tokens"] for r in rs]),
            "answer_tokens": tokens, "total_wall_s": round(sum(r["wall_s"] for r in rs), 2),
            "total_cpu_s": round(sum(r["cpu_s"] for r in rs), 2),
            "prompts_with_blocks": sum(r["blocks"] > 0 for r in rs),
            "text_mismatches": sum(r["text_mismatch"] for r in rs)}


def _speeds(rows: dict, idx: list[int]) -> dict:
    """The speed ratios over the prompts `idx` (paired: the same prompts for every decoder)."""
    from .eval_stats import ratio_ci, speedup_ci

    def col(mode, key):
        return [rows[mode][i][key] for i in idx]

    def speed(base, new, clock="wall_s"):
        return speedup_ci(col(base, clock), col(base, "answer_tokens"), col(new, clock), col(new, "answer_tokens"))

    return {"speedup": speed("control", "aspd"), "speedup_cpu": speed("control", "aspd", "cpu_s"),
            "speedup_with_drafts": speed("control+drafts", "aspd+drafts"),
            "speedup_with_drafts_cpu": speed("control+drafts", "aspd+drafts", "cpu_s"),
            "drafts_alone": speed("control", "control+drafts"),
            "latency_ratio": ratio_ci(col("control", "wall_s"), col("aspd", "wall_s")),
            "forward_pass_ratio": ratio_ci(col("control", "forward_passes"), col("aspd", "forward_passes"))}


def _brief(d: dict) -> dict:
    """Point figures of a summary (the intervals stay in the full report)."""
    return {k: (v.get("ratio", v.get("mean")) if isinstance(v, dict) else v) for k, v in d.items()}


def summarize(rows: dict, threads: int) -> dict:
    from ..model import kernels as cpu_kernels
    n = len(rows["control"])
    per = {mode: _mode_summary(rs) for mode, rs in rows.items()}
    speeds = _speeds(rows, list(range(n)))
    return {**_brief(speeds),
            "accuracy_aspd": per["aspd"]["accuracy"]["mean"], "accuracy_control": per["control"]["accuracy"]["mean"],
            "accuracy_aspd_drafts": per["aspd+drafts"]["accuracy"]["mean"],
            "accuracy_control_drafts": per["control+drafts"]["accuracy"]["mean"],
            "text_mismatches": sum(m["text_mismatches"] for m in per.values()),
            "n": n, "threads": threads, "kernels": cpu_kernels.default().name,
            "intervals": speeds, "modes": per, "answers": rows}


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
            log(f"{name} {i + 1}/{len(exs)} " + " ".join(
                f"{m}:{rows[m][-1]['overlap']:.2f} {rows[m][-1]['wall_s']:.2f}s" for m in modes)
                + f" blocks {rows['aspd'][-1]['blocks']}")
    return rows


def summarize_real(rows: dict) -> dict:
    """Quality against the reference, speed split by whether ASPD opened a block, and how often it
    opened one where the reference has no list (a block where nothing is parallel)."""
    from .eval_stats import mean_ci
    n = len(rows["aspd"])
    opened = [i for i in range(n) if rows["aspd"][i]["blocks"] > 0]
    serial = [i for i in range(n) if rows["aspd"][i]["blocks"] == 0]
    no_list = [i for i in range(n) if not rows["aspd"][i]["reference_list"]]
    per = {mode: {**_mode_summary(rs), "overlap": mean_ci([r["overlap"] for r in rs]),
                  "loops": sum(r["loop"] for r in rs)} for mode, rs in rows.items()}

    def paired(idx):
        return mean_ci([rows["aspd"][i]["overlap"] - rows["control"][i]["overlap"] for i in idx])

    quality = {"overlap_aspd": per["aspd"]["overlap"]["mean"], "overlap_control": per["control"]["overlap"]["mean"],
               "overlap_diff": paired(range(n)),
               "overlap_diff_list": paired([i for i in range(n) if i not in no_list]),
               "overlap_diff_no_list": paired(no_list),
               "checks_aspd": per["aspd"]["accuracy"]["mean"], "checks_control": per["control"]["accuracy"]["mean"],
               "loops_aspd": per["aspd"]["loops"], "loops_control": per["control"]["loops"]}
    if "base" in per:
        quality["checks_base"] = per["base"]["accuracy"]["mean"]
    return {"n": n, "prompts_with_blocks": len(opened), "reference_no_list": len(no_list),
            "blocks_where_no_list": sum(rows["aspd"][i]["blocks"] > 0 for i in no_list),
            "quality": quality,
            "block_prompts": _speeds(rows, opened) if opened else None,
            "serial_prompts": _speeds(rows, serial) if serial else None,
            "all_prompts": _speeds(rows, list(range(n))),
            "modes": per, "answers": rows}


def eval_main(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from . import eval_prompts
    from .data import read_jsonl
    if min(args.sharegpt_n, args.mtbench_n) < 0 or args.max_tokens < 1 or args.threads < 1 \
            or min(args.n, args.real_n) < -1:
        raise ConfigError("--n, --real-n, --sharegpt-n and --mtbench-n must be >= 0, "
                          "--max-tokens and --threads >= 1")
    examples = read_jsonl(args.data) if Path(args.data).is_file() else heldout()
    examples = examples[:args.n if args.n >= 0 else 24 if args.quick else len(examples)]
    real = eval_prompts.real_prompts()
    real = real[::4] if args.quick and args.real_n < 0 else real[:args.real_n] if args.real_n >= 0 else real
    sets = {"real": real,
            "sharegpt": eval_prompts.sharegpt_heldout(args.sharegpt_data, args.sharegpt_n) if args.sharegpt_n else [],
            "mtbench": eval_prompts.mtbench_first_turns(args.mtbench_n) if args.mtbench_n else []}
    if not examples and not any(sets.values()):
        raise ConfigError(f"{args.data} has no examples and every real set is empty (--real-n 0); "
                          "run `paraspec aspd build-data`")
    adapters, cache = Path(args.adapters), Path(args.cache)
    aspd = args.aspd_model or str(model_folder("aspd", adapters, cache))
    control = args.control_model or str(model_folder("control", adapters, cache))
    report = run_eval(aspd, control, examples, args.max_tokens, args.threads,
                      log=None if args.quick else print, real=sets, base_model=args.base_model,
                      open_threshold=args.open_threshold)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    brief = brief_report(report)
    print(json.dumps(brief) if args.quick else json.dumps(brief, indent=1))
    return 0


def brief_report(report: dict) -> dict:
    """The report's point figures: what --quick prints as one line."""
    brief = {k: v for k, v in report.items() if k not in ("modes", "answers", "intervals") + REAL_SETS}
    for name in REAL_SETS:
        real = report.get(name)
        if real:
            brief[name] = {"n": real["n"], "prompts_with_blocks": real["prompts_with_blocks"],
                           "blocks_where_no_list": real["blocks_where_no_list"],
                           "reference_no_list": real["reference_no_list"],
                           **{k: (v["mean"] if isinstance(v, dict) else v) for k, v in real["quality"].items()},
                           **{f"{group}_{k}": v for group in ("block_prompts", "serial_prompts")
                              for k, v in _brief(real[group] or {}).items()
                              if k in ("speedup", "speedup_with_drafts")}}
    return brief
