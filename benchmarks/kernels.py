"""The compiled CPU kernels per ISA and kernel path against the torch paths, by row count: raw
calls of the dense, W8A8 and GGUF linears and the decode attention, median us per call.

    python benchmarks/kernels.py [--threads 2] [--reps 9] [--footprint-mb 256] [--quick] [--only gguf]
    python benchmarks/kernels.py --cap-torch-avx2   # torch side as on an AVX2-only CPU
    python benchmarks/kernels.py --only gguf --model q4_k_m --threads 1   # a K-quant file's linears
    python benchmarks/kernels.py --only invariance [--cap-torch-avx2]      # which paths keep a row's bits

Dense linears of SmolLM2-135M's shapes (qkv, o, gate_up, down, LM head) for 1-128 rows, fp32 x
in: each module's row-invariant `linear` with bf16 and with fp32 weights, against torch's bf16
oneDNN prepacked matmul (linear.Linear's path before the kernel; x converted to bf16 as it
did), bf16 F.linear (the path where oneDNN has no bf16), MKL's fp32 F.linear and oneDNN's packed
fp32 matmul.

W8A8 linears of SmolLM2-135M's shapes (qkv, o, gate_up, down, LM head) for 1-128 rows (two
activation passes, fp32 activations in, as the forward calls them): each W8A8 inner loop of each
module this CPU runs (vnni512, avxvnni, avx2), quant.py's torch path (int_dot), and the bf16 oneDNN
Linear of linear.py. Decode attention of one layer (9 heads, 3 kv heads, head size 64) at
300 and 1000 keys for 1-16 rows: each module against attention.attention.

Candidates are interleaved call batch by call batch, in a rotating order, so drift and noisy
neighbours hit all of them alike; cells are medians over --reps. Each call takes the next of
several copies of its weights (or the next layer of a 30-layer cache), --footprint-mb of them,
so weights come from memory as in a forward over a whole model, not from a warm cache.

GGUF linears (--only gguf): the model's own blocks (--model: default, a path, or q4_k_m / q6_k...,
the bundled model requantised by llama.cpp) on every kernel path this CPU runs (avx512:vnni512,
avx512:amx, avx2:avxvnni, avx2:avx2), no attention, norms or Python around the calls: each
linear of a layer rotating over the model's layers (weights from memory, as in a forward), the
LM head, and their sum per forward (layers x a layer's linears + the head) with t(k)/t(1), the
curve a verify step's linears follow. With --threads 1 every section's clock is still the wall
clock of a call batch: quote ratios.

Row invariance (--only invariance; bits, not time, so not in the default run): which matmul
paths give a row the same bits whatever the number of rows in the call, the property parallel
decoding's exactness rests on, on this CPU and torch build. For SmolLM2-135M's linear shapes and
a few small ones, fp32 and bf16 weights, the rows of an M-row call (M = 1..64) against the same
rows of a 4-row call and each row computed alone (padded to 4 rows, as the forward pads): torch
F.linear (MKL for fp32), oneDNN's prepacked matmul (linear.Linear's where it exists) and
the csrc linear of every ISA module (row-invariant by construction); then the GGUF block linears
(Q4_1, Q8_0, Q4_K, Q6_K, two activation passes) on every kernel variant this CPU runs
(avx512:amx switches to AMX tiles at 16 sub-rows, Q8_0 at 20: its M = 8+ calls take another
loop than M < 8 and must still agree bit for bit). With --cap-torch-avx2: torch as on AVX2.

Sections: --only dense,w8a8,attention,gguf,invariance (default: all but invariance).

--cap-torch-avx2 re-runs the script with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
MKL_ENABLE_INSTRUCTIONS=AVX2, which caps torch's own kernels (_int_mm, oneDNN, MKL) at AVX2:
an approximation of an AVX2 machine's torch baseline on this CPU (not its memory system).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable

CAP_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")
LINEARS = {
    "qkv": (960, 576),
    "o": (576, 576),
    "gate_up": (3072, 576),
    "down": (576, 1536),
    "lm_head": (49152, 576),
}
ROWS = (1, 2, 4, 8, 16, 32, 128)
ATT_ROWS = (1, 4, 8, 16)
ATT_KEYS = (300, 1000, 2000)
HEADS, KV_HEADS, HEAD_DIM, LAYERS = 9, 3, 64, 30


def cpu_line() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return "cpu: unknown"
    model = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")),
        "?",
    )
    flags = next(
        (ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), []
    )
    return f"cpu: {model}; flags: {' '.join(f for f in FLAGS if f in flags) or '-'}"


def timed(
    cands: dict[str, Callable[[], object]], reps: int, batch_s: float = 0.004
) -> dict[str, float]:
    """Median us per call of each candidate, interleaved batch by batch in a rotating order."""
    names = list(cands)
    counts = {}
    for name in names:  # warm up, and size a batch to ~batch_s
        t0 = time.perf_counter()
        cands[name]()
        counts[name] = max(1, int(batch_s / max(time.perf_counter() - t0, 1e-7)))
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            fn, k = cands[name], counts[name]
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            times[name].append((time.perf_counter() - t0) / k * 1e6)
    return {n: statistics.median(v) for n, v in times.items()}


def rotating(items: list) -> Callable[[], object]:
    """Each call returns the next item (the next weight copy / cache layer)."""
    state = {"i": -1}

    def nxt():
        state["i"] = (state["i"] + 1) % len(items)
        return items[state["i"]]

    return nxt


def modules() -> dict[str, object]:
    out = {}
    for isa in ("avx512", "avx2"):
        try:
            m = importlib.import_module(f"paraspec.model._kernels_{isa}")
        except ImportError:
            print(f"  _kernels_{isa}: not built")
            continue
        if m.cpu_supported():
            out[isa] = m
        else:
            print(f"  _kernels_{isa}: this CPU cannot run it")
    return out


def _onednn_packed(w):
    """torch's oneDNN prepacked weight (linear.Linear's path before the csrc kernel), or None
    where oneDNN has no path for the dtype (bf16 without avx512bw / avx_ne_convert)."""
    import torch

    if not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        torch.ops.mkldnn._linear_pointwise(
            torch.zeros(1, w.shape[1], dtype=w.dtype), packed, None, "none", [], ""
        )
        return packed
    except (RuntimeError, AttributeError):
        return None


def bench_dense(mods: dict, rows: tuple[int, ...], reps: int, footprint: int, shapes: dict) -> None:
    import torch
    import torch.nn.functional as F

    print("\n## Dense linear (fp32 x), median us per call\n")
    print(
        "csrc `linear` per module and weight dtype; onednn: torch's packed matmul (bf16 with x "
        "converted to bf16); F.linear: torch's default (MKL sgemm for fp32)\n"
    )
    table: dict[tuple[str, int], dict[str, float]] = {}
    for name, (n, k) in shapes.items():
        w32 = torch.randn(n, k) * 0.05
        c32 = max(1, footprint // (n * k * 4))
        c16 = max(1, footprint // (n * k * 2))
        w32s = [w32] + [w32.clone() for _ in range(c32 - 1)]
        w16s = [w32.bfloat16() for _ in range(c16)]
        p16 = _onednn_packed(w16s[0])
        p16s = [p16] + [_onednn_packed(w) for w in w16s[1:]] if p16 is not None else []
        p32 = _onednn_packed(w32)
        p32s = [p32] + [_onednn_packed(w) for w in w32s[1:]] if p32 is not None else []
        cands: dict[str, Callable] = {}
        for isa, m in mods.items():
            if hasattr(m, "linear"):
                cands[f"{isa} bf16"] = (
                    lambda m=m, nxt=rotating(w16s): lambda x: m.linear(x, nxt())
                )()
                cands[f"{isa} fp32"] = (
                    lambda m=m, nxt=rotating(w32s): lambda x: m.linear(x, nxt())
                )()
        if p16s:
            cands["onednn bf16"] = (
                lambda nxt=rotating(p16s): (
                    lambda x: torch.ops.mkldnn._linear_pointwise(
                        x.bfloat16(), nxt(), None, "none", [], ""
                    )
                )
            )()
        cands["F.linear bf16"] = (
            lambda nxt=rotating(w16s): lambda x: F.linear(x.bfloat16(), nxt())
        )()
        cands["F.linear fp32"] = (lambda nxt=rotating(w32s): lambda x: F.linear(x, nxt()))()
        if p32s:
            cands["onednn fp32"] = (
                lambda nxt=rotating(p32s): (
                    lambda x: torch.ops.mkldnn._linear_pointwise(x, nxt(), None, "none", [], "")
                )
            )()
        cols = list(cands)
        print(f"### {name} (N={n}, K={k}), {c32} fp32 / {c16} bf16 weight copies\n")
        print("| rows | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for m_rows in rows:
            x = torch.randn(m_rows, k)
            res = timed({c: (lambda f=f: f(x)) for c, f in cands.items()}, reps)
            table[name, m_rows] = res
            print(f"| {m_rows} | " + " | ".join(f"{res[c]:.0f}" for c in cols) + " |", flush=True)
        print()
    layer = ("qkv", "o", "gate_up", "down")
    if all(s in shapes for s in layer):  # a decoder layer's four linears, times the model's layers
        print(
            f"### the {LAYERS}-layer stack ({' + '.join(layer)}, x {LAYERS}; no LM head), ms per forward\n"
        )
        print("| rows | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for m_rows in rows:
            ms = {c: LAYERS * sum(table[s, m_rows][c] for s in layer) / 1000 for c in cols}
            print(f"| {m_rows} | " + " | ".join(f"{ms[c]:.1f}" for c in cols) + " |")
        print()


def bench_linears(
    mods: dict, rows: tuple[int, ...], reps: int, footprint: int, shapes: dict
) -> None:
    import torch

    from paraspec.model.kernels import TORCH, Kernels
    from paraspec.model.quant import Int8Linear, quantize_weight
    from paraspec.model.linear import Linear

    print("\n## W8A8 linear, median us per call (2 activation passes; bf16: linear.Linear)\n")
    for name, (n, k) in shapes.items():
        w = torch.randn(n, k) * 0.05
        qweight, scale = quantize_weight(w)
        copies = max(1, footprint // (n * k))
        ref = Int8Linear(qweight, scale, None, kernels=TORCH)  # quant.py's torch path (int_dot)
        if mods:  # quant.py's packing for the compiled kernels (one layout for every ISA)
            lin = Int8Linear(qweight, scale, None, kernels=Kernels(*next(iter(mods.items()))))
            packs = [lin.packed] + [lin.packed.clone() for _ in range(copies - 1)]
            comp, sc = lin.comp, lin.scale
        int_mms = [ref] + [copy.copy(ref) for _ in range(copies - 1)]
        for c in int_mms[1:]:
            c.weight_t = ref.weight_t.clone()
        bf16s = [Linear(w.bfloat16()) for _ in range(max(1, copies // 2))]
        cols = [f"{isa}:{v}" for isa, m in mods.items() for v in m.w8a8_variants()] + [
            "int_dot",
            "bf16",
        ]
        print(f"### {name} (N={n}, K={k}), {copies} weight copies\n")
        print("| rows | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for m_rows in rows:
            x = torch.randn(m_rows, k)
            cands = {}
            for isa, m in mods.items():
                for v in m.w8a8_variants():
                    nxt = rotating(packs)
                    cands[f"{isa}:{v}"] = lambda m=m, v=v, nxt=nxt: m.w8a8_linear(
                        x, nxt(), comp, sc, None, n, 2, variant=v
                    )
            nxt_i, nxt_b = rotating(int_mms), rotating(bf16s)
            cands["int_dot"] = lambda: nxt_i()(x)
            cands["bf16"] = lambda: nxt_b()(x)
            res = timed(cands, reps)
            print(f"| {m_rows} | " + " | ".join(f"{res[c]:.0f}" for c in cols) + " |", flush=True)
        print()


def bench_attention(mods: dict, reps: int) -> None:
    import torch

    from paraspec.model.args import ModelArgs
    from paraspec.model.kv_cache import KVCache
    from paraspec.model.attention import attention, attention_bias

    print(
        f"## Decode attention, one layer ({HEADS} heads, {KV_HEADS} kv heads, head size {HEAD_DIM}), "
        f"median us per call, {LAYERS} layers rotated\n"
    )
    cols = [*mods, "torch"]
    print("| keys | rows | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 2) + "|")
    args = ModelArgs(
        arch="llama",
        vocab_size=16,
        dim=HEADS * HEAD_DIM,
        n_layers=LAYERS,
        n_heads=HEADS,
        n_kv_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        hidden_dim=16,
    )
    group = HEADS // KV_HEADS
    for keys in ATT_KEYS:
        cache = KVCache(args, keys + 16)
        cache.k.normal_()
        cache.v.normal_()
        for n in ATT_ROWS:
            cache.length = keys - n  # the new rows' keys end at `keys`
            q = torch.randn(n, HEADS, HEAD_DIM)
            bias = attention_bias(cache, n, None, group)  # once per forward, shared by the layers
            nxt = rotating(list(range(LAYERS)))
            empty = torch.empty(0, dtype=torch.bool)  # a causal chain

            def kernel(m=None):
                i = nxt()
                return m.attention(q, cache.k[i], cache.v[i], cache.length, empty, 0.125)

            cands = {isa: (lambda m=m: kernel(m)) for isa, m in mods.items()}
            cands["torch"] = lambda: attention(q, cache, nxt(), bias, 0.125)
            res = timed(cands, reps)
            print(
                f"| {keys} | {n} | " + " | ".join(f"{res[c]:.0f}" for c in cols) + " |", flush=True
            )


def bench_gguf(rows: tuple[int, ...], reps: int, model: str) -> None:
    import torch

    from paraspec import LLM
    from paraspec.model import kernels
    from paraspec.model.gguf_requant import bench_model

    path = bench_model(model)
    models = {
        k.label: LLM(path, quantization="gguf", kernels=k.label).model
        for k in kernels.runnable()
        if k.module is not None
    }
    if not models:
        print("\n## GGUF linears: no compiled kernel path on this CPU\n")
        return
    first = next(iter(models.values()))
    layers = len(first.layers)
    names = [n for n, lin in vars(first.layers[0]).items() if hasattr(lin, "kind")]
    cols = list(models)
    print(f"\n## GGUF linears of {path} ({layers} layers), median us per call, per kernel path\n")
    table: dict[tuple[str, int], dict[str, float]] = {}
    for n in [*names, "lm_head"]:
        lin = first.lm_head if n == "lm_head" else getattr(first.layers[0], n)
        print(f"### {n} ({lin.kind}, {lin.in_features} -> {lin.out_features})\n")
        print("| rows | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for m_rows in rows:
            x = torch.randn(m_rows, lin.in_features)
            cands = {
                label: (
                    lambda nxt=rotating([m.lm_head] if n == "lm_head" else [getattr(L, n) for L in m.layers]): (
                        nxt()(x)
                    )
                )
                for label, m in models.items()
            }
            table[n, m_rows] = res = timed(cands, reps)
            print(f"| {m_rows} | " + " | ".join(f"{res[c]:.0f}" for c in cols) + " |", flush=True)
        print()
    print(
        f"### all linears of a forward ({layers} x {' + '.join(names)} + lm_head), ms (t(k)/t(1))\n"
    )
    print("| rows | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    ms = {
        r: {
            c: (layers * sum(table[n, r][c] for n in names) + table["lm_head", r][c]) / 1000
            for c in cols
        }
        for r in rows
    }
    for r in rows:
        print(
            f"| {r} | "
            + " | ".join(f"{ms[r][c]:.2f} ({ms[r][c] / ms[rows[0]][c]:.2f})" for c in cols)
            + " |"
        )
    print()


INV_SHAPES = [
    (960, 576),
    (576, 576),
    (3072, 576),
    (576, 1536),
    (49152, 576),
    (256, 128),
    (128, 256),
    (96, 32),
]
INV_ROWS = (1, 2, 3, 5, 8, 12, 16, 24, 32, 64)


def invariance_paths(w) -> dict:
    import torch
    import torch.nn.functional as F

    out = {"F.linear": lambda x: F.linear(x.to(w.dtype), w)}
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        out["oneDNN packed"] = lambda x: torch.ops.mkldnn._linear_pointwise(
            x.to(w.dtype), packed, None, "none", [], ""
        )
    except (RuntimeError, AttributeError) as e:
        out["oneDNN packed"] = str(e).split("\n")[0][:60]
    from paraspec.model import kernels

    for k in kernels.runnable():
        if k.module is not None and hasattr(k.module, "linear") and k.name not in out:
            out[f"paraspec {k.name}"] = lambda x, m=k.module: m.linear(x.float().contiguous(), w)
    return out


def bench_invariance() -> None:
    """Bits, not time: which paths give a row the same bits whatever the rows in the call."""
    import torch

    print(
        "\n## Row invariance: M-row calls against a 4-row call, and each of 16 rows computed alone\n"
    )
    torch.manual_seed(0)
    print(
        f"{'dtype':9} {'N x K':12} {'path':18} {'M whose first rows differ from M=4':36} rows of 16 differing alone"
    )
    for dtype in (torch.float32, torch.bfloat16):
        for n, k in INV_SHAPES:
            w = (torch.randn(n, k) * 0.05).to(dtype)
            x = torch.randn(64, k)
            for name, fn in invariance_paths(w).items():
                if isinstance(fn, str):
                    print(f"{str(dtype)[6:]:9} {f'{n}x{k}':12} {name:18} n/a: {fn}")
                    continue
                ref = fn(x[:4])
                bad = [
                    m for m in INV_ROWS if not torch.equal(fn(x[:m])[: min(m, 4)], ref[: min(m, 4)])
                ]
                y16 = fn(x[:16])
                alone = [
                    i
                    for i in range(16)
                    if not torch.equal(fn(x[i : i + 1].expand(4, -1).contiguous())[0], y16[i])
                ]
                print(
                    f"{str(dtype)[6:]:9} {f'{n}x{k}':12} {name:18} {str(bad) if bad else 'none':36} "
                    f"{alone if alone else 'none'}"
                )
    invariance_gguf()


def invariance_gguf() -> None:
    """The same table for the GGUF linears, per format and kernel variant."""
    import gguf
    import numpy as np
    import torch

    from paraspec.model import ggml, kernels
    from paraspec.model.ggml_kquants import quantize_q4_k, quantize_q6_k

    quant = {
        "Q4_1": lambda w: gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1),
        "Q8_0": lambda w: gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
        "Q4_K": quantize_q4_k,
        "Q6_K": quantize_q6_k,
    }
    print(
        f"{'format':9} {'N x K':12} {'path':18} {'M whose first rows differ from M=4':36} rows of 16 differing alone"
    )
    for kind, fn in quant.items():
        shapes = (
            [(960, 576), (3072, 576), (576, 1536)]
            if kind[-1] != "K"
            else [(960, 768), (3072, 768), (768, 1536)]
        )
        for n, k in shapes:  # K-quants: K a multiple of 256
            w = ggml.GGUFWeight(
                kind,
                fn((np.random.default_rng(0).standard_normal((n, k)) * 0.05).astype(np.float32)),
            )
            x = torch.randn(64, k)
            for kern in kernels.runnable():
                if kern.module is None:
                    continue
                lin = ggml.GGUFLinear(w, kernels=kern)
                ref = lin(x[:4])
                bad = [
                    m
                    for m in INV_ROWS
                    if not torch.equal(lin(x[:m])[: min(m, 4)], ref[: min(m, 4)])
                ]
                y16 = lin(x[:16])
                alone = [i for i in range(16) if not torch.equal(lin(x[i : i + 1])[0], y16[i])]
                print(
                    f"{kind:9} {f'{n}x{k}':12} {kern.label:18} {str(bad) if bad else 'none':36} "
                    f"{alone if alone else 'none'}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument(
        "--footprint-mb", type=int, default=256, help="weight bytes each candidate cycles through"
    )
    ap.add_argument("--quick", action="store_true", help="rows 1, 8, 32 only, 5 reps")
    ap.add_argument(
        "--cap-torch-avx2", action="store_true", help="cap torch's kernels at AVX2 (re-executes)"
    )
    ap.add_argument(
        "--only",
        default="dense,w8a8,attention,gguf",
        help="sections to run (comma-separated): dense, w8a8, attention, gguf, invariance",
    )
    ap.add_argument(
        "--model",
        default="default",
        help="the GGUF section's model: default, a .gguf path, q4_k_m...",
    )
    ap.add_argument(
        "--shapes", default=",".join(LINEARS), help="dense/W8A8 shapes to run (comma-separated)"
    )
    ap.add_argument(
        "--rows", default="", help="row counts (comma-separated; default 1,2,4,8,16,32,128)"
    )
    args = ap.parse_args()
    if args.cap_torch_avx2 and any(os.environ.get(k) != v for k, v in CAP_ENV.items()):
        # before torch loads
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **CAP_ENV})

    import torch

    torch.set_num_threads(args.threads)
    capped = all(os.environ.get(k) == v for k, v in CAP_ENV.items())
    print(cpu_line())
    print(
        f"threads: {args.threads}; torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}"
        + (
            "; torch capped at AVX2 by " + " ".join(f"{k}={v}" for k, v in CAP_ENV.items())
            if capped
            else ""
        )
    )
    print(f"command: python {' '.join(sys.argv)}")
    mods = modules()
    reps = 5 if args.quick else args.reps
    only = set(args.only.split(","))
    rows = (
        tuple(int(r) for r in args.rows.split(","))
        if args.rows
        else (1, 8, 32)
        if args.quick
        else ROWS
    )
    shapes = {name: LINEARS[name] for name in args.shapes.split(",")}
    if "dense" in only:
        bench_dense(mods, rows, reps, args.footprint_mb << 20, shapes)
    if "w8a8" in only:
        bench_linears(mods, rows, reps, args.footprint_mb << 20, shapes)
    if "attention" in only:
        bench_attention(mods, reps)
    if "invariance" in only:
        bench_invariance()
    if "gguf" in only:
        bench_gguf(tuple(r for r in rows if r <= 16) if not args.rows else rows, reps, args.model)


if __name__ == "__main__":
    main()
