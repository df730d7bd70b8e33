"""A GGUF model's verify rows against the instruction set's integer peak, and llama.cpp's own k-row
forward on the same file beside them:

    python benchmarks/verify_rows.py [--model qwen2.5-coder-1.5b] [--threads 2] [--reps 5] [--rows 1,2,4,8,16]

For k = 1, 2, 4, 8, 16 rows (single thread, then --threads N if N > 1), interleaved rep by rep in a
rotating order, medians of --reps:

- linears: every GGUF linear of the model (each layer's in order, then the LM head) called once on
  k random rows, as a forward calls them (weights streamed from memory), and t(k)/t(1);
- the achieved int8 multiply-adds per second per core, k x sum(in_features x out_features) / time /
  threads, against the peak: multiply-adds per cycle per core (--macs-per-cycle; 64 on plain AVX2
  with two vector multiply pipes: 2 x 256-bit vpmaddubsw a cycle, 32 u8 x s8 products each; 64 on
  a Zen 4's AVX-512 VNNI too: one 512-bit vpdpbusd a cycle, 64 products, benchmarks/vnni_idiom.c) x the
  clock /proc/cpuinfo reports (the highest "cpu MHz": a VM's figure may be nominal; --ghz sets
  the one benchmarks/avx2_idiom.c measures, which also says what the instructions sustain);
- forward: the model's whole forward over k new rows after a 500-token cache, logits for every
  row (a verify step), and t(k)/t(1);
- llama.cpp (llama-cpp-python, where installed): `Llama.eval` of k tokens after the same 500-token
  context, logits_all=True, and t(k)/t(1).

On one thread the clock is the thread's CPU time (llama.cpp's single thread computes in the
calling one), which other processes do not stretch; with more, the wall clock: on a shared
machine quote ratios, run it quiet for absolutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

CONTEXT = 500
FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_facts() -> tuple[str, float]:
    """'model; flags' and the highest clock in GHz /proc/cpuinfo reports (0 when unknown)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return "unknown CPU", 0.0
    field = lambda name: [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(name)]  # noqa: E731
    flags = (field("flags") or [""])[0].split()
    mhz = max((float(v) for v in field("cpu MHz")), default=0.0)
    present = [f for f in FLAGS if f in flags]
    absent = [f for f in FLAGS if f not in flags]
    return (
        f"{(field('model name') or ['?'])[0]}; flags: {' '.join(present) or '-'}"
        f"; not: {' '.join(absent) or '-'}"
    ), mhz / 1000


def linears_of(model) -> list:
    """The forward's GGUF linears in call order: each layer's, then the LM head."""
    out = [lin for layer in model.layers for lin in vars(layer).values() if hasattr(lin, "kind")]
    return out + [model.lm_head]


def timed_round(
    cands: dict[str, Callable[[], object]],
    order: list[str],
    times: dict[str, list[float]],
    clock: Callable[[], float],
) -> None:
    for name in order:
        t0 = clock()
        cands[name]()
        times[name].append(clock() - t0)


def ours(
    model, rows: list[int], clock: Callable[[], float], parts: dict
) -> dict[str, Callable[[], object]]:
    """Our candidates; each linears call also adds its time per weight format to parts[k, format]
    (the LM head on its own), to show which format holds the rate down."""
    from paraspec.model.transformer import SeqInput

    lins = linears_of(model)
    xs = {k: {lin.in_features: torch.randn(k, lin.in_features) for lin in lins} for k in rows}
    tokens = torch.randint(
        100, 1000, (CONTEXT + max(rows),), generator=torch.Generator().manual_seed(0)
    )
    cache = model.new_cache(CONTEXT + 2 * max(rows))
    model.forward(tokens[:CONTEXT], torch.arange(CONTEXT), [SeqInput(cache, CONTEXT)], prompt=True)
    cache.length = CONTEXT  # the k rows are written past it, never committed

    def linears(k: int) -> None:
        spent: dict[str, float] = {}
        for lin in lins:
            t0 = clock()
            lin(xs[k][lin.in_features])
            group = "head " + lin.kind if lin is model.lm_head else lin.kind
            spent[group] = spent.get(group, 0.0) + clock() - t0
        for group, t in spent.items():
            parts.setdefault((k, group), []).append(t)

    def forward(k: int) -> None:
        model.forward(
            tokens[CONTEXT : CONTEXT + k],
            torch.arange(CONTEXT, CONTEXT + k),
            [SeqInput(cache, k)],
            logits_rows=torch.arange(k),
        )

    out = {}
    for k in rows:
        out[f"linears {k}"] = lambda k=k: linears(k)
        out[f"forward {k}"] = lambda k=k: forward(k)
    return out


def format_rates(model, rows: list[int], parts: dict, threads: int) -> None:
    """G multiply-adds per second per core of each weight format's linears, by k."""
    macs: dict[str, int] = {}
    for lin in linears_of(model):
        group = "head " + lin.kind if lin is model.lm_head else lin.kind
        macs[group] = macs.get(group, 0) + lin.in_features * lin.out_features
    groups = sorted(macs, key=lambda g: -macs[g])
    print(
        "\nper format, G multiply-adds/s per core (share of a row's multiply-adds;"
        " of the linears' time at k):"
    )
    for g in groups:
        cells = []
        for k in rows:
            t = statistics.median(parts[k, g][1:] or parts[k, g])
            whole = sum(statistics.median(parts[k, h][1:] or parts[k, h]) for h in groups)
            cells.append(f"k={k} {k * macs[g] / t / threads / 1e9:.1f} ({t / whole:.0%})")
        print(f"  {g:12} {macs[g] / sum(macs.values()):4.0%}  " + "  ".join(cells))


def llama_cpp(path: str, threads: int, rows: list[int]) -> dict[str, Callable[[], object]]:
    try:
        from llama_cpp import Llama
    except ImportError:
        return {}
    llm = Llama(
        model_path=path,
        n_ctx=CONTEXT + 2 * max(rows),
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=True,
        verbose=False,
    )
    llm.eval(list(range(1000, 1000 + CONTEXT)))

    def run(k: int) -> None:
        llm.n_tokens = CONTEXT  # eval drops the cache from here on and writes the k rows again
        llm.eval(list(range(2000, 2000 + k)))

    return {f"llama.cpp {k}": (lambda k=k: run(k)) for k in rows}


def report(
    threads: int, rows: list[int], med: dict[str, float], macs_row: int, peak: float
) -> None:
    print(f"\n### {threads} thread(s), ms (t(k)/t(1)), medians\n")
    head = "| k | linears | G MAC/s per core | of peak | forward | llama.cpp eval | llama.cpp / forward |"
    print(head + "\n" + "|---" * (head.count("|") - 1) + "|")

    def cell(name: str, k: int) -> str:
        t, t1 = med.get(f"{name} {k}"), med.get(f"{name} {rows[0]}")
        return f"{t * 1e3:.1f} ({t / t1:.2f})" if t is not None else "-"

    for k in rows:
        rate = k * macs_row / med[f"linears {k}"] / threads / 1e9
        share = f"{rate / peak:.0%}" if peak else "-"
        ratio = (
            f"{med[f'llama.cpp {k}'] / med[f'forward {k}']:.2f}" if f"llama.cpp {k}" in med else "-"
        )
        print(
            f"| {k} | {cell('linears', k)} | {rate:.1f} | {share} | {cell('forward', k)} | "
            f"{cell('llama.cpp', k)} | {ratio} |",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-1.5b", help="a catalog name or a GGUF path")
    p.add_argument(
        "--kernels", default=None, help="a kernel path label, e.g. avx2:avx2 (default: the best)"
    )
    p.add_argument(
        "--threads", type=int, default=2, help="also time this many threads (1: single only)"
    )
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rows", default="1,2,4,8,16")
    p.add_argument(
        "--macs-per-cycle",
        type=float,
        default=64.0,
        help="int8 multiply-adds per cycle per core at the ISA's peak (plain AVX2: 2 x 32 with"
        " vpmaddubsw; AVX-512 VNNI on Zen 4: 1 x 64 with vpdpbusd zmm; vnni_idiom.c measures it)",
    )
    p.add_argument(
        "--ghz",
        type=float,
        default=0.0,
        help="the core clock for the peak (default: /proc/cpuinfo's, which a VM may report"
        " nominal; benchmarks/avx2_idiom.c measures it)",
    )
    p.add_argument("--no-llamacpp", action="store_true")
    a = p.parse_args()
    from paraspec import LLM, catalog

    path = str(catalog.cached_path(a.model)) if a.model in catalog.ARTIFACTS else a.model
    rows = [int(r) for r in a.rows.split(",")]
    cpu, ghz = cpu_facts()
    source = "/proc/cpuinfo"
    if a.ghz:
        ghz, source = a.ghz, "--ghz"
    torch.set_num_threads(1)
    model = LLM(path, quantization="gguf", kernels=a.kernels).model
    lins = linears_of(model)
    macs_row = sum(lin.in_features * lin.out_features for lin in lins)
    peak = a.macs_per_cycle * ghz
    print(
        f"cpu: {cpu}; clock {ghz:.3f} GHz ({source})\nkernels: {model.kernels.label}; model: {path}"
    )
    kinds = sorted({f"{lin.kind} {lin.in_features}->{lin.out_features}" for lin in lins})
    print(
        f"linears timed: {len(lins)} ({', '.join(kinds)}): {macs_row / 1e9:.3f} G multiply-adds per row"
    )
    print(
        f"peak: {a.macs_per_cycle:g} int8 multiply-adds per cycle per core x {ghz:.3f} GHz = {peak:.1f} G/s"
        " per core (plain AVX2: 2 vpmaddubsw a cycle x 32 products; Zen 4 VNNI: 1 vpdpbusd zmm x 64);"
        " rate = k x multiply-adds per row"
        " / time / threads"
    )
    for threads in sorted({1, a.threads}):
        torch.set_num_threads(threads)
        # one thread: its CPU time (llama.cpp's one thread computes in the caller's), which other
        # processes on a shared machine do not stretch; more: the wall clock
        clock = time.thread_time if threads == 1 else time.perf_counter
        parts: dict = {}
        cands = ours(model, rows, clock, parts)
        if not a.no_llamacpp and os.path.isfile(path):
            cands.update(llama_cpp(path, threads, rows))
        names = list(cands)
        times: dict[str, list[float]] = {n: [] for n in names}
        timed_round(cands, names, {n: [] for n in names}, clock)  # warm-up
        for rep in range(a.reps):
            shift = rep * 3 % len(names)
            timed_round(cands, names[shift:] + names[:shift], times, clock)
        report(threads, rows, {n: statistics.median(v) for n, v in times.items()}, macs_row, peak)
        format_rates(model, rows, parts, threads)


if __name__ == "__main__":
    main()
