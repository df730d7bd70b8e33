"""results.json (the run's environment, config, systems, tasks and every measurement), then
report.md and the plots; a lossless failure is printed and makes the exit code 1."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

from .aggregate import identity_failures
from .plan import Plan, Run
from .report import write_report


def environment(plan: Plan) -> dict:
    from importlib import metadata

    import torch

    from ..info import cpu_report

    try:  # the peers' library (the bench extra); the paraspec systems run without it
        transformers = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        transformers = None
    report = cpu_report()  # CPU features (CPUID), the kernel path and op kernels, default numerics
    return {
        "cpu": report["cpu"],
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_features": report["features"],
        "kernels": report["kernels"],
        "ops": report["ops"],
        "torch": torch.__version__,
        "transformers": transformers,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": _git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "dtype": plan.engine.dtype,
        "quantization": plan.engine.quantization,
        "kv_cache_dtype": plan.engine.kv_cache_dtype,
        "activation_passes": plan.engine.activation_passes,
        "model": plan.engine.model,
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
    }


def _git_commit() -> str | None:
    """HEAD of the checkout this file is in, "+dirty" with uncommitted changes; None outside a checkout."""
    from ..source_version import git_commit

    return git_commit()


def _plan_record(plan: Plan) -> dict:
    """The plan as results.json records it: flat, the model options under their flags' names."""
    e = plan.engine
    record = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "engine"}
    record.update(
        model=e.model,
        dtype=e.dtype,
        quantization=e.quantization,
        threads=e.num_threads,
        kv_cache_dtype=e.kv_cache_dtype,
        activation_passes=e.activation_passes,
    )
    return {k: str(v) if isinstance(v, Path) else v for k, v in record.items()}


def write_results(run: Run) -> int:
    plan = run.plan
    plan.out.mkdir(parents=True, exist_ok=True)
    results = {
        "schema": 1,
        "environment": {**environment(plan), "forward_cost": run.forward_cost},
        "config": {
            **_plan_record(plan),
            "trie_prefilled": bool(plan.memory_file),
            "memory_policy": (
                "pre-filled from " + plan.memory_file if plan.memory_file else "empty"
            )
            + " at the start of each task set; accumulates the set's earlier tasks (the "
            "system's own outputs); every run of a task starts from the same snapshot, so "
            "repeats never see their own previous answer; '+warm' systems also start "
            "each set from the warm memory (warm_memory_file)",
            "warm_memory": run.warm_memory,
            "sampled": {"temperature": 0.8, "top_p": 0.95},
        },
        "systems": {k: dataclasses.asdict(v) for k, v in run.systems.items()},
        "tasks": run.tasks,
        "measurements": [m.to_dict() for m in run.measurements],
        "serving": run.serving,
        "notes": run.notes,
        "wall_s": round(run.elapsed(), 2),
    }
    (plan.out / "results.json").write_text(json.dumps(results, indent=1))
    files = write_report(results, plan.out)
    print(
        f"paraspec bench: {len(run.measurements)} runs in {run.elapsed():.1f} s -> "
        f"{plan.out / 'results.json'}, {', '.join(str(f) for f in files)}",
        file=sys.stderr,
    )
    bad = identity_failures(results)
    for b in bad:
        print(f"paraspec bench: LOSSLESSNESS: {b}", file=sys.stderr)
    return 1 if bad else 0
