"""`paraspec info`: what this machine runs. The CPU's features (from CPUID), the kernel chosen for
each op and why the others are not, the default numerics, and the forward-cost curve t(k)/t(1)
measured on it (what the drafters size their drafts by). The bench report records the same.

    paraspec info                    # text; loads the default model to measure the cost curve
    paraspec info --json --no-cost   # machine-readable, without loading a model
    paraspec info --numerics         # also time one decode step in fp32, bf16, w8a8 (and gguf) here
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads in the functions: `paraspec --help` stays quick
    from .model.kernels import Kernels


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def features() -> list[str]:
    """The features that matter here, CPUID's view (AVX-VNNI as the avx2 module sees it)."""
    from .model import kernels as cpu_kernels

    feats = set(cpu_kernels.cpu_features())
    avx2 = cpu_kernels._load("avx2")[0]
    if avx2 is not None and "avxvnni" in avx2.w8a8_variants():
        feats.add("avx_vnni")
    avx512 = cpu_kernels._load("avx512")[0]
    # CPUID's AMX-INT8 and the OS's tile grant
    if avx512 is not None and "amx" in avx512.w8a8_variants():
        feats.add("amx_int8")
    return [f for f in cpu_kernels.SHOWN if f in feats]


def _torch_linear(dtype_name: str) -> str:
    """What torch runs for a linear of that dtype here: oneDNN's prepacked matmul or F.linear."""
    import torch

    from .model.kernels import TORCH
    from .model.linear import Linear

    packed = (
        Linear(torch.zeros(8, 8, dtype=getattr(torch, dtype_name)), kernels=TORCH).packed
        is not None
    )
    return "oneDNN packed" if packed else "F.linear"


def cpu_report(kernels: Kernels | None = None) -> dict:
    """Everything above but the cost curve, as a dict (JSON-ready)."""
    import torch

    from .model import kernels as cpu_kernels
    from .model.ggml import NEVER, prompt_rows
    from .model.attention import PROMPT_ATTENTION_KEYS, PROMPT_ATTENTION_ROWS

    k = kernels or cpu_kernels.default()
    compiled = k.module is not None
    numerics = cpu_kernels.default_numerics(k)
    gguf = cpu_kernels.gguf_numerics(k) if compiled else None
    passes = cpu_kernels.resolve_activation_passes("auto", k, "gguf")
    gguf_rows = prompt_rows(k, passes) if compiled else NEVER
    return {
        "cpu": cpu_name(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "features": features(),
        "kernels": k.label,
        "kernels_env": os.environ.get(cpu_kernels.ENV, ""),
        "not_running": {
            isa: cpu_kernels.why_not(isa) for isa in cpu_kernels.ISAS if cpu_kernels.why_not(isa)
        },
        "ops": {
            "decode/verify attention": f"csrc attention, {k.name}"
            if compiled
            else "torch (fp64 sums over key chunks)",
            "prompt attention": (
                f"csrc attention for chunks of at most {PROMPT_ATTENTION_ROWS.get(k.name, 0)} rows"
                + (
                    f" and any chunk over at most {PROMPT_ATTENTION_KEYS} keys"
                    if k.name == "avx2"
                    else ""
                )
                + ", else "
                if compiled
                else ""
            )
            + "torch fp32 (prefill needs no row invariance)",
            # the amx variant's tiles serve GGUF blocks only: its W8A8 calls run vnni512's loop
            "w8a8 linear": (
                f"csrc w8a8, {k.name}:vnni512 (AMX tiles are for GGUF blocks)"
                if k.w8a8_variant == "amx"
                else f"csrc w8a8, {k.label}"
            )
            if compiled
            else "torch (quant.int_dot: exact fp32 matmuls)",
            "decode/verify linear": f"csrc linear, {k.name} (fp32 and bf16 weights)"
            if compiled
            else f"torch, rows padded to 4: bf16 {_torch_linear('bfloat16')}, fp32 {_torch_linear('float32')}",
            "gguf linear": (
                f"csrc gguf blocks, {k.label}"
                + (" (AMX int8 tiles for calls of 20+ sub-rows)" if k.w8a8_variant == "amx" else "")
                if compiled
                else "none: a GGUF file is dequantised to bf16/fp32"
            ),
            "prompt linear": f"torch: bf16 {_torch_linear('bfloat16')}, fp32 F.linear",
            "gguf prompt linear": (
                (
                    "csrc gguf blocks for chunks of any height"
                    if gguf_rows >= NEVER
                    else f"csrc gguf blocks for chunks under {gguf_rows} rows, else its weights "
                    "dequantised through torch's matmul"
                )
                + f" ({passes} int8 activation pass{'es' if passes > 1 else ''})"
            )
            if compiled
            else "none: a GGUF file is dequantised to bf16/fp32",
        },
        "default_numerics": {
            "dtype": numerics.dtype,
            "quantization": numerics.quantization,
            "why": numerics.why,
        },
        "gguf_numerics": None
        if gguf is None
        else {"dtype": gguf.dtype, "quantization": gguf.quantization, "why": gguf.why},
    }


def measure_cost(model: str, kernels: Kernels) -> dict:
    """t(k)/t(1) of the default numerics on `model`, as the engine probes it at start-up: the
    probe's readings, the curve made plausible from them (and which sizes read implausibly), its
    age and the paired steps that refreshed it (none yet in a fresh process; a server's
    /metrics shows the curve its own steps keep)."""
    from .api import LLM

    llm = LLM(model, kernels=kernels.label)
    info = llm.engine.cost_info()
    probe = llm.runner.cost_probe
    shown = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
    return {
        "model": llm.model_name,
        "dtype": llm.config.dtype,
        "quantization": llm.config.quantization,
        "activation_passes": llm.model.activation_passes,
        "t_k_over_t_1": {
            str(k): round(v, 3) for k, v in llm.runner.forward_cost().items() if k in shown
        },
        "probe_read": {str(k): round(v, 3) for k, v in (probe.measured.items() if probe else ())},
        "implausible_probe_sizes": info["implausible_probe_sizes"],
        "pinned": bool(info.get("pinned")),
        "age_s": info.get("age_s", 0.0),
        "refresh_samples": info.get("samples", 0),
    }


def measure_numerics(model: str, kernels: Kernels, reps: int = 9) -> dict:
    """Median ms of a 1-row and an 8-row decode forward at a 256-token context, per numerics:
    what default_numerics' choice rests on, on this machine."""
    import statistics
    import time

    import torch

    from .model.loader import is_gguf, load_model
    from .model.transformer import SeqInput, Transformer

    out = {}
    loaded = load_model(model, torch.float32)
    todo = [
        ("float32", torch.float32, None),
        ("bfloat16", torch.bfloat16, None),
        ("w8a8", torch.bfloat16, "w8a8"),
    ]
    if is_gguf(model):  # the file's own blocks
        todo.append(("gguf", torch.bfloat16, "gguf"))
    for name, dtype, quant in todo:
        if quant == "gguf":
            loaded = load_model(model, torch.float32, keep_quantized=True)
        weights = (
            loaded.weights
            if quant or dtype == torch.float32
            else {k: v.to(dtype) if v.dim() == 2 else v for k, v in loaded.weights.items()}
        )
        m = Transformer(loaded.args, weights, dtype, quantization=quant, kernels=kernels)
        cache = m.new_cache(320)
        m.forward(
            torch.zeros(256, dtype=torch.long),
            torch.arange(256),
            [SeqInput(cache, 256)],
            prompt=True,
        )
        cache.commit(range(256))
        times = {1: [], 8: []}
        for _ in range(reps):
            for k in times:
                t0 = time.perf_counter()
                m.forward(
                    torch.zeros(k, dtype=torch.long),
                    torch.arange(256, 256 + k),
                    [SeqInput(cache, k)],
                    torch.arange(k),
                )
                times[k].append((time.perf_counter() - t0) * 1e3)
        out[name] = {f"ms_{k}_rows": round(statistics.median(v), 2) for k, v in times.items()}
    return out


def format_report(r: dict) -> str:
    from .model.kernels import ENV
    from .runner import COST_ENV

    lines = [
        f"CPU          {r['cpu']} ({r['machine']}, {r['cores']} cores; torch {r['torch']}, "
        f"{r['torch_threads']} threads, ATen capability {r['torch_cpu_capability']})",
        f"features     {' '.join(r['features']) or '-'}   (CPUID)",
        f"kernels      {r['kernels']}"
        + (f"   ({ENV}={r['kernels_env']})" if r["kernels_env"] else ""),
    ]
    lines += [f"  not {isa:7}{why}" for isa, why in r["not_running"].items()]
    lines += [f"  {op:24} {how}" for op, how in r["ops"].items()]
    n = r["default_numerics"]
    lines.append(
        f"default      safetensors: {n['dtype']}{' + ' + n['quantization'] if n['quantization'] else ''}"
        f"   ({n['why']})"
    )
    if r.get("gguf_numerics"):
        lines.append(f"             gguf file: its own blocks   ({r['gguf_numerics']['why']})")
    for name, t in r.get("numerics", {}).items():
        lines.append(
            f"{name:12} 1 row {t['ms_1_rows']:.1f} ms, 8 rows {t['ms_8_rows']:.1f} ms a decode step"
        )
    if "forward_cost" in r:
        c = r["forward_cost"]
        curve = "  ".join(f"{k}:{v:.2f}" for k, v in c["t_k_over_t_1"].items())
        lines.append(
            f"t(k)/t(1)    {curve}   ({c['model']}, {c['dtype']}"
            f"{' + ' + c['quantization'] if c['quantization'] else ''}"
            f"{', %d int8 activation pass%s' % (c['activation_passes'], 'es' * (c['activation_passes'] > 1)) if c['quantization'] else ''})"
        )
        bad = c.get("implausible_probe_sizes") or []
        lines.append(
            f"  curve      {'pinned by ' + COST_ENV if c.get('pinned') else 'probed'} {c.get('age_s', 0):.1f} s ago, "
            f"refreshed from {c.get('refresh_samples', 0)} paired steps (a server keeps it by its own "
            "steps: /metrics paraspec_forward_cost)"
            + (
                f"; implausible probe readings replaced at k = {', '.join(map(str, bad))} (read "
                + "  ".join(f"{k}:{v:.2f}" for k, v in c["probe_read"].items() if int(k) in bad)
                + ")"
                if bad
                else ""
            )
        )
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "info", help="this machine's CPU features, kernels, default numerics and forward cost"
    )
    p.add_argument(
        "--model", default="default", help="model to measure the cost curve t(k)/t(1) on"
    )
    p.add_argument(
        "--no-cost", action="store_true", help="skip the cost curve (no model is loaded)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument(
        "--numerics",
        action="store_true",
        help="time a decode step in fp32, bf16, w8a8 and (a GGUF model) gguf",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: all cores)"
    )
    p.set_defaults(func=info_main)


def info_main(args: argparse.Namespace) -> int:
    import torch

    from .model import kernels as cpu_kernels

    if args.threads:
        torch.set_num_threads(args.threads)
    kernels = cpu_kernels.default()
    report = cpu_report(kernels)
    if args.numerics:
        report["numerics"] = measure_numerics(args.model, kernels)
    if not args.no_cost:
        report["forward_cost"] = measure_cost(args.model, kernels)
    print(json.dumps(report) if args.json else format_report(report))
    return 0
