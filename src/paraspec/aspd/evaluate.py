"""`paraspec aspd eval [--quick]`: ASPD vs the control on held-out synthetic tasks.

Three decoders over the same held-out prompts, greedy, one request at a time (batch 1), taking
turns per prompt so that load changes on a shared machine hit all three alike:
- control: the control model (same recipe, plain text) decoded autoregressively;
- aspd: the ASPD model with plugin "aspd" (serial segments AR, branches in parallel);
- aspd+drafts: the same with memory_decoding drafts (serial segments and branches).
Per decoder: accuracy by the exact checker (synth.check on the engine's `.text`, what a user
reads), forward passes per answer token (decode forwards / tokens of `.text`, in the base
tokenizer), and wall-clock per answer (prefill included). speedup = control's total wall-clock /
aspd's. speedup_cpu (and speedup_with_drafts_cpu) is the same ratio of the process's CPU time
(time.process_time) over the same calls: on a loaded, shared machine wall-clock also counts the
time other processes hold the cores, which CPU time does not, so the two together tell a slow
decoder from a busy machine. text_mismatches counts ASPD answers whose `.text` is not markup.to_plain of the engine's
raw markup text (it must be 0: stream.py).
Models are the committed adapters merged into cached Hugging Face folders (export), rebuilt
when an adapter changes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

from .paths import ADAPTER_DIR, DATA_DIR, EXPORT_DIR

MODES = ("control", "aspd", "aspd+drafts")
ASPD = {"plugin_type": "aspd"}
ASPD_DRAFTS = {"plugin_type": "aspd", "drafter": {"plugin_type": "memory_decoding"}}


def add_parser(s) -> None:
    e = s.add_parser("eval", help="accuracy, forward passes and wall-clock: ASPD vs the control")
    e.add_argument("--quick", action="store_true", help="24 held-out prompts; print one JSON line")
    e.add_argument("--n", type=int, default=0, help="held-out prompts (default: all, or 24 with --quick)")
    e.add_argument("--data", default=str(DATA_DIR / "heldout.jsonl"))
    e.add_argument("--adapters", default=str(ADAPTER_DIR))
    e.add_argument("--cache", default=str(EXPORT_DIR), help="where the merged model folders are cached")
    e.add_argument("--aspd-model", default=None, help="an exported ASPD folder (instead of the adapters)")
    e.add_argument("--control-model", default=None, help="an exported control folder (instead of the adapters)")
    e.add_argument("--max-tokens", type=int, default=256)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--out", default=None, help="also write the full report (JSON) here")
    e.set_defaults(func=eval_main)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def model_folder(variant: str, adapters: Path, cache: Path) -> Path:
    """The merged folder of adapters/<variant>.safetensors, exported again if the adapter changed."""
    from .train_command import export
    adapter = adapters / f"{variant}.safetensors"
    folder = cache / variant
    stamp = folder / "adapter.sha256"
    digest = _sha(adapter) if adapter.is_file() else None
    if digest is None or not stamp.is_file() or stamp.read_text() != digest:
        export(adapter, folder)
        stamp.write_text(digest or "")
    return folder


def heldout() -> list:
    """build-data's held-out split, regenerated (deterministic: seed 1000, disjoint from seed 0's 1200)."""
    from . import synth
    return synth.generate(120, 1000, exclude={e.prompt for e in synth.generate(1200, 0)})


def run_eval(aspd_model: str, control_model: str, examples: list, max_tokens: int = 256,
             threads: int = 1, log=None) -> dict:
    import torch

    from ..api import LLM
    from ..sampling.params import SamplingParams
    from .markup import to_plain
    from .synth import check
    torch.set_num_threads(threads)
    llms = {"control": LLM(control_model), "aspd": LLM(aspd_model, plugin_params=ASPD)}
    plugins = {"control": None, "aspd": None, "aspd+drafts": ASPD_DRAFTS}
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    count = llms["control"].tokenizer.encode
    rows = {m: [] for m in MODES}
    warm = [{"role": "user", "content": examples[0].prompt}]
    for mode in ("control", "aspd"):      # first call pays one-time costs (kernel packing, caches)
        llms[mode].chat(warm, SamplingParams(temperature=0, max_tokens=4))
    for i, ex in enumerate(examples):
        msgs = [{"role": "user", "content": ex.prompt}]
        for mode in MODES:
            llm = llms["control" if mode == "control" else "aspd"]
            t0, c0 = time.perf_counter(), time.process_time()
            out = llm.chat(msgs, params, plugins[mode])[0]
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            raw, text = out.stats.get("aspd_raw_text"), out.outputs[0].text
            rows[mode].append({"id": ex.id, "family": ex.family, "ok": check(ex, text), "wall_s": wall, "cpu_s": cpu,
                               "forward_passes": out.stats.get("forward_passes", 0),
                               "answer_tokens": len(count(text)), "text": text, "raw": raw,
                               "text_mismatch": raw is not None and to_plain(raw) != text})
        if log:
            log(f"{i + 1}/{len(examples)} " + " ".join(f"{m}:{'ok' if rows[m][-1]['ok'] else 'x'} "
                                                     f"{rows[m][-1]['wall_s']:.2f}s" for m in MODES))
    report = summarize(rows, threads)
    n = llms["aspd"].numerics
    report["numerics"] = f"{n.dtype}" + (f"+{n.quantization}" if n.quantization else "")
    return report


def summarize(rows: dict, threads: int) -> dict:
    from ..model import kernels as cpu_kernels
    per = {}
    for mode, rs in rows.items():
        tokens = sum(r["answer_tokens"] for r in rs)
        per[mode] = {"accuracy": sum(r["ok"] for r in rs) / len(rs),
                     "forward_passes_per_token": sum(r["forward_passes"] for r in rs) / max(1, tokens),
                     "median_wall_s": statistics.median(r["wall_s"] for r in rs),
                     "total_wall_s": sum(r["wall_s"] for r in rs), "answer_tokens": tokens,
                     "total_cpu_s": sum(r["cpu_s"] for r in rs),
                     "text_mismatches": sum(r["text_mismatch"] for r in rs),
                     "by_family": {f: sum(r["ok"] for r in rs if r["family"] == f) / n
                                   for f in sorted({r["family"] for r in rs})
                                   for n in [sum(r["family"] == f for r in rs)]}}
    ctrl = per["control"]["total_wall_s"]
    return {"speedup": round(ctrl / per["aspd"]["total_wall_s"], 3),
            "accuracy_aspd": round(per["aspd"]["accuracy"], 4),
            "accuracy_control": round(per["control"]["accuracy"], 4),
            "speedup_with_drafts": round(ctrl / per["aspd+drafts"]["total_wall_s"], 3),
            "accuracy_aspd_drafts": round(per["aspd+drafts"]["accuracy"], 4),
            "speedup_cpu": round(per["control"]["total_cpu_s"] / max(1e-9, per["aspd"]["total_cpu_s"]), 3),
            "speedup_with_drafts_cpu": round(per["control"]["total_cpu_s"]
                                             / max(1e-9, per["aspd+drafts"]["total_cpu_s"]), 3),
            "forward_pass_ratio": round(per["control"]["forward_passes_per_token"]
                                        / max(1e-9, per["aspd"]["forward_passes_per_token"]), 3),
            "text_mismatches": sum(m["text_mismatches"] for m in per.values()),
            "n": len(rows["control"]), "threads": threads, "kernels": cpu_kernels.default().name,
            "modes": per, "answers": rows}


def eval_main(args: argparse.Namespace) -> int:
    from ..errors import ConfigError
    from .data import read_jsonl
    if args.n < 0 or args.max_tokens < 1 or args.threads < 1:
        raise ConfigError("--n must be >= 0, --max-tokens and --threads >= 1")
    examples = read_jsonl(args.data) if Path(args.data).is_file() else heldout()
    n = args.n or (24 if args.quick else len(examples))
    examples = examples[:n]
    if not examples:
        raise ConfigError(f"{args.data} has no examples; run `paraspec aspd build-data`")
    adapters, cache = Path(args.adapters), Path(args.cache)
    aspd = args.aspd_model or str(model_folder("aspd", adapters, cache))
    control = args.control_model or str(model_folder("control", adapters, cache))
    report = run_eval(aspd, control, examples, args.max_tokens, args.threads,
                      log=None if args.quick else print)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    brief = {k: v for k, v in report.items() if k not in ("modes", "answers")}
    if args.quick:
        print(json.dumps(brief))
    else:
        print(json.dumps(brief, indent=1))
        for mode, m in report["modes"].items():
            print(f"{mode:12s} accuracy {m['accuracy']:.3f} forward/token {m['forward_passes_per_token']:.3f} "
                  f"median {m['median_wall_s']:.2f}s total {m['total_wall_s']:.1f}s {m['by_family']}")
    return 0
