"""Decoding where it is bandwidth-bound: a synthetic GGUF file with a real 0.5B-3B model's shapes and
random weights (paraspec.bench.synthetic_gguf), and on it what parallel decoding would give there.

    python benchmarks/bandwidth_model.py write --shape qwen2.5-1.5b --quant Q4_K_M [--out PATH]
    python benchmarks/bandwidth_model.py measure --shape qwen2.5-1.5b --quant Q4_K_M [--threads 2] [--json PATH]

Shapes: qwen2.5-0.5b, qwen2.5-1.5b, llama-3.2-1b, llama-3.2-3b (their config.json; --layers N /
--vocab N scale one down for a quick check); quants Q4_0 and Q4_K_M (llama.cpp's mix of block
formats; --pure: the base format everywhere). The file goes to ~/.cache/paraspec/synthetic/ (a
few GB for 3B; never committed); `measure` writes it first when it is missing.

`measure`, in one process, on the file:
  1. the machine's read bandwidth: torch summing a --bw-mib fp32 tensor, 1 thread and --threads;
  2. the engine's cost probe t(k)/t(1) (ModelRunner.forward_cost, what `paraspec info` shows and
     drafts are sized by), and one timed forward of k rows at a --context-token cache, logits
     for all k rows as a verify step asks (as benchmarks/verify_breakdown.py), k = 1..16;
  3. AR decode tok/s, paraspec against llama.cpp (llama-cpp-python, skipped with a message when
     it is not installed: `make peers`) on the same file and threads: a fixed prompt of random
     tokens, greedy, --new-tokens tokens past EOS, --runs runs each, interleaved, median;
  4. bandwidth use: bytes of weights one decode step streams / the time of a token, against (1):
     llama.cpp's the file's blocks, paraspec's its kernels' packed copies plus any linear the
     loader dequantised (a fused q/k/v of mixed formats: Q4_K_M's Q6_K attn_v; those layers then
     run in the Python loop, not one csrc call: both are printed); the KV cache adds 2 x layers x
     kv_heads x head_dim x 4 bytes per context token;
  5. the replayed speedup over AR of memory_decoding, hybrid and lookahead per task set at the
     curve of (2) and the one-row step of (3): tools/replay.py on greedy outputs of the bench's
     tasks recorded with the bundled model (--records, or recorded once into the cache:
     minutes), bench/replayed_speedup.py. Acceptance is SmolLM2-135M's; the prices are this
     model's. Times are wall clock (--threads threads): quote ratios from a shared machine.
Prints markdown tables; the figures go to --json (default: next to the file).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from paraspec.bench import synthetic_gguf as syn  # noqa: E402
from paraspec.source_version import git_commit  # noqa: E402

KS = (1, 2, 4, 8, 12, 16)


def shape_of(a) -> syn.ModelShape:
    shape = syn.SHAPES[a.shape]
    return shape.scaled(a.layers, a.vocab) if a.layers or a.vocab else shape


def file_of(a, shape: syn.ModelShape) -> Path:
    return Path(a.out).expanduser() if a.out else syn.default_path(shape, a.quant, a.pure)


def write(a) -> Path:
    shape = shape_of(a)
    path = file_of(a, shape)
    plan = syn.tensor_plan(shape, a.quant, a.pure)
    t0 = time.perf_counter()
    syn.write_synthetic(path, shape, a.quant, a.seed, a.pure)
    kinds = sorted({t.kind for t in plan if t.matmul})
    print(
        f"wrote {path}: {shape.name} {a.quant}{' pure' if a.pure else ''}, {path.stat().st_size / 2**30:.2f} GiB "
        f"({', '.join(kinds)}) in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    return path


def read_bandwidth(mib: int, threads: int) -> dict[int, float]:
    """GB/s of torch summing a mib MiB fp32 tensor (best of 5), per thread count."""
    x = torch.ones(mib << 18)
    out = {}
    for n in sorted({1, threads}):
        torch.set_num_threads(n)
        x.sum()
        best = min(_timed(x.sum) for _ in range(5))
        out[n] = round(x.nbytes / best / 1e9, 2)
    torch.set_num_threads(threads)
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def forward_times(llm, context: int, reps: int) -> dict[int, float]:
    """Median ms of one forward of k new rows (logits for all k) over a context-token cache."""
    from paraspec.model.transformer import SeqInput

    model, runner = llm.model, llm.runner
    tokens = torch.randint(
        100, 1000, (context + max(KS),), generator=torch.Generator().manual_seed(0)
    )
    cache = runner.new_cache(context + 2 * max(KS))
    runner.prefill(cache, tokens[:context].tolist())
    times: dict[int, list[float]] = {k: [] for k in KS}
    order = list(KS)
    for rep in range(reps + 1):  # a warm-up round, then reps, a new order each
        order = order[1::2] + order[0::2][::-1]
        for k in order:  # rows written past the cache's length, never committed
            dt = _timed(
                lambda: model.forward(
                    tokens[context : context + k],
                    torch.arange(context, context + k),
                    [SeqInput(cache, k)],
                    torch.arange(k),
                )
            )
            if rep:
                times[k].append(dt)
    return {k: round(1e3 * statistics.median(v), 3) for k, v in times.items()}


def engine_weights(model) -> tuple[int, list[str]]:
    """Bytes of weights paraspec's decode step streams (the kernels' packed GGUF copies, dense
    weights at their dtype) and the linears that are dense (a float weight the file holds; a fused
    q/k/v or gate/up of mixed block formats, as Q4_K_M's Q6_K attn_v beside Q4_K q and k, stays
    blocks: ggml_parts.GGUFPartsLinear, one packed copy per part)."""
    from paraspec.model.ggml import GGUFLinear
    from paraspec.model.ggml_parts import GGUFPartsLinear

    named = [
        (f"layers.{i}.{n}", getattr(layer, n))
        for i, layer in enumerate(model.layers)
        for n in ("wqkv", "wo", "w_gate_up", "w_down")
    ] + [("lm_head", model.lm_head)]
    total, dense = 0, []
    for name, lin in named:
        if isinstance(lin, (GGUFLinear, GGUFPartsLinear)):
            for part in getattr(lin, "parts", [lin]):
                packed = getattr(part, "packed", None)
                total += packed.nbytes if packed is not None else 0
        else:
            total += lin.weight.numel() * lin.weight.element_size()
            dense.append(name)
    return total, dense


def llamacpp_peer(path: Path, threads: int, n_ctx: int):
    """llama-cpp-python on the file, or (None, why not)."""
    try:
        import llama_cpp
    except ImportError:
        return (
            None,
            "llama-cpp-python is not installed (`make peers` builds it): no llama.cpp figures",
        )
    from paraspec.bench.peers import llamacpp_probe

    why = llamacpp_probe(str(path))
    if why:
        return None, why
    peer = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=512,
        verbose=False,
    )
    return peer, f"llama-cpp-python {llama_cpp.__version__}"


def run_paraspec(llm, prompt: list[int], n: int) -> dict:
    from paraspec import SamplingParams

    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))[0]
    s = out.stats
    return {"tokens_per_s": s["tokens_per_s"], "ttft_s": s["ttft_s"], "tokens": len(out.token_ids)}


def run_llamacpp(peer, prompt: list[int], n: int) -> dict:
    """Greedy, n tokens whatever they are; decode tok/s over the tokens after the first (as
    sequence_stats counts paraspec's)."""
    peer.reset()
    t0, first, out = time.perf_counter(), None, []
    for tok in peer.generate(
        prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True
    ):
        if first is None:
            first = time.perf_counter()
        out.append(int(tok))
        if len(out) >= n:
            break
    end = time.perf_counter()
    return {
        "tokens_per_s": round((len(out) - 1) / (end - first), 3),
        "ttft_s": round(first - t0, 6),
        "tokens": len(out),
    }


def decode_speeds(llm, peer, prompt: list[int], n: int, runs: int) -> dict[str, dict]:
    systems = {"paraspec": lambda: run_paraspec(llm, prompt, n)}
    if peer is not None:
        systems["llama.cpp"] = lambda: run_llamacpp(peer, prompt, n)
    run_paraspec(llm, prompt, min(n, 8))  # warm-up
    if peer is not None:
        run_llamacpp(peer, prompt, min(n, 8))
    got: dict[str, list[dict]] = {k: [] for k in systems}
    for r in range(runs):  # interleaved, the order alternating: drift hits both
        for name in list(systems) if r % 2 == 0 else list(systems)[::-1]:
            got[name].append(systems[name]())
    return {
        name: {
            "tokens_per_s": statistics.median(x["tokens_per_s"] for x in v),
            "runs": [x["tokens_per_s"] for x in v],
            "ttft_s": statistics.median(x["ttft_s"] for x in v),
        }
        for name, v in got.items()
    }


def measure(a) -> dict:
    from paraspec import LLM
    from paraspec.bench import replayed_speedup as rs
    from paraspec.info import cpu_name

    shape = shape_of(a)
    path = file_of(a, shape)
    if not path.exists():
        write(a)
    plan = syn.tensor_plan(shape, a.quant, a.pure)
    threads = a.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    result: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "git_commit": git_commit(),
        "cpu": cpu_name(),
        "machine": platform.machine(),
        "threads": threads,
        "file": str(path),
        "shape": dataclasses.asdict(shape),
        "quant": a.quant,
        "pure": a.pure,
        "file_bytes": path.stat().st_size,
        "blocks": {},
    }
    for t in plan:
        if t.matmul:
            result["blocks"][t.kind] = result["blocks"].get(t.kind, 0) + t.nbytes
    print(
        f"{shape.name} {a.quant}: {path} ({path.stat().st_size / 2**30:.2f} GiB), {threads} threads, "
        f"{result['cpu']}",
        flush=True,
    )
    result["read_bandwidth_gb_s"] = read_bandwidth(a.bw_mib, threads)
    print(
        f"read bandwidth (torch sum of {a.bw_mib} MiB): "
        + ", ".join(f"{n} thread(s) {v} GB/s" for n, v in result["read_bandwidth_gb_s"].items()),
        flush=True,
    )
    records = None
    if not a.no_replay:
        rec_path = (
            Path(a.records).expanduser()
            if a.records
            else syn.CACHE / f"records-{'-'.join(a.tasks.split(','))}-n{a.record_n}.jsonl"
        )
        records = rs.load_or_record(rec_path, a.tasks.split(","), a.record_n)
        result["records"] = str(rec_path)
        gc.collect()
    t0 = time.perf_counter()
    llm = LLM(
        str(path), num_threads=threads, kernels=a.kernels, activation_passes=a.activation_passes
    )
    result.update(
        load_s=round(time.perf_counter() - t0, 1),
        kernels=llm.model.kernels.label,
        numerics=f"{llm.config.dtype} + {llm.config.quantization}",
    )
    print(
        f"paraspec loaded in {result['load_s']} s: kernels {result['kernels']}, {result['numerics']}",
        flush=True,
    )
    engine_bytes, dense = engine_weights(llm.model)
    result.update(
        engine_weight_bytes=engine_bytes,
        dense_linears=dense,
        fused_decoder=llm.model.decoder is not None,
    )
    if dense:
        print(
            f"dense (dequantised) linears: {len(dense)}, e.g. {', '.join(dense[:3])}; layers in one csrc call: "
            f"{result['fused_decoder']}",
            flush=True,
        )
    curve = llm.runner.forward_cost()
    probe = llm.runner.cost_probe
    result["cost_curve"] = {k: round(curve[k], 3) for k in sorted(curve)}
    result["cost_probe_measured"] = (
        {k: round(v, 3) for k, v in sorted(probe.measured.items())} if probe else None
    )
    result["forward_ms"] = forward_times(llm, a.context, a.reps)
    gen = torch.Generator().manual_seed(a.seed)
    prompt = torch.randint(
        100, min(shape.vocab_size, 49152), (a.prompt_tokens,), generator=gen
    ).tolist()
    peer, peer_note = (
        (None, "--no-llamacpp")
        if a.no_llamacpp
        else llamacpp_peer(path, threads, a.prompt_tokens + a.new_tokens + 64)
    )
    result["llamacpp"] = peer_note
    if peer is None:
        print(peer_note, flush=True)
    result["decode"] = decode_speeds(llm, peer, prompt, a.new_tokens, a.runs)
    streamed = syn.weight_bytes(plan, shape.tied)
    kv_per_token = 2 * shape.n_layers * shape.n_kv_heads * shape.head_dim * 4
    best_bw = max(result["read_bandwidth_gb_s"].values())
    result["bytes_per_step"] = {"weights": streamed, "kv_cache_per_context_token": kv_per_token}
    for d in result["decode"].values():
        d["weights_gb_s"] = round(
            (engine_bytes if d is result["decode"]["paraspec"] else streamed)
            * d["tokens_per_s"]
            / 1e9,
            2,
        )
        d["of_read_bandwidth"] = round(d["weights_gb_s"] / best_bw, 3)
    one_row_ms = result["forward_ms"][1]
    result["forward_weights_gb_s"] = round(engine_bytes / (one_row_ms / 1e3) / 1e9, 2)
    if records is not None:
        # a token of AR, everything included
        step_s = 1 / result["decode"]["paraspec"]["tokens_per_s"]
        result["replay"] = {
            "step_s": round(step_s, 5),
            "speedups": rs.replayed_speedups(records, curve, step_s),
        }
    return result


def print_tables(r: dict) -> None:
    f, c = r["forward_ms"], r["cost_curve"]
    print(
        f"\n{r['shape']['name']} {r['quant']}, kernels {r['kernels']}, {r['threads']} threads, {r['date']}"
    )
    probe = r["cost_probe_measured"] or {}
    print(
        "\n| k | engine curve t(k)/t(1) | its probe's reading | forward ms (k rows, all logits) | forward t(k)/t(1) |"
        "\n|---|---|---|---|---|"
    )
    for k in KS:
        read = f"{probe[k]:.2f}" if k in probe else "-"
        print(f"| {k} | {c.get(k, float('nan')):.2f} | {read} | {f[k]:.1f} | {f[k] / f[1]:.2f} |")
    bw = r["read_bandwidth_gb_s"]
    mib, ours = r["bytes_per_step"]["weights"] / 2**20, r["engine_weight_bytes"] / 2**20
    print(
        f"\nweights streamed per step: the file's blocks {mib:.0f} MiB, paraspec's ({len(r['dense_linears'])} dense"
        f" linears, layers in one csrc call: {r['fused_decoder']}) {ours:.0f} MiB; machine read bandwidth: "
        + ", ".join(f"{v} GB/s ({n} thr)" for n, v in bw.items())
        + f"; a one-row forward streams them at {r['forward_weights_gb_s']} GB/s"
    )
    print(
        "\n| system | AR tok/s (median) | runs | ms / token | weights GB/s | of read bandwidth |\n|---|---|---|---|---|---|"
    )
    for name, d in r["decode"].items():
        print(
            f"| {name} | {d['tokens_per_s']:.2f} | {', '.join(f'{x:.2f}' for x in d['runs'])} | "
            f"{1e3 / d['tokens_per_s']:.1f} | {d['weights_gb_s']} | {d['of_read_bandwidth']:.0%} |"
        )
    if "llama.cpp" in r["decode"]:
        print(
            f"\nparaspec AR / llama.cpp: {r['decode']['paraspec']['tokens_per_s'] / r['decode']['llama.cpp']['tokens_per_s']:.2f}x"
        )
    else:
        print(f"\n({r['llamacpp']})")
    if "replay" not in r:
        return
    sp = r["replay"]["speedups"]
    names, groups = list(sp), list(next(iter(sp.values())))
    peer = r["decode"].get("llama.cpp")
    ratio = r["decode"]["paraspec"]["tokens_per_s"] / peer["tokens_per_s"] if peer else None
    print(
        f"\nreplayed speedup over paraspec AR (median request; tokens/step), this curve, a {1e3 * r['replay']['step_s']:.1f} ms step"
        + (", best x llama.cpp" if ratio else "")
    )
    print("| task set | " + " | ".join(names) + (" | best / llama.cpp |" if ratio else " |"))
    print("|---" * (len(names) + 1 + bool(ratio)) + "|")
    for g in groups:
        cells = [
            f"{sp[n][g]['median_request_speedup']:.2f}x ({sp[n][g]['tokens_per_step']:.2f})"
            for n in names
        ]
        best = max(sp[n][g]["median_request_speedup"] for n in names)
        print(f"| {g} | " + " | ".join(cells) + (f" | {best * ratio:.2f}x |" if ratio else " |"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("write", "measure"):
        p = sub.add_parser(name)
        p.add_argument("--shape", choices=sorted(syn.SHAPES), default="qwen2.5-1.5b")
        p.add_argument("--quant", choices=syn.QUANTS, default="Q4_K_M")
        p.add_argument(
            "--pure", action="store_true", help="every matmul weight in the base format (no Q6_K)"
        )
        p.add_argument(
            "--layers", type=int, default=None, help="fewer layers than the shape's (a quick check)"
        )
        p.add_argument("--vocab", type=int, default=None, help="another vocabulary size (>= 49152)")
        p.add_argument(
            "--out",
            default=None,
            help="the file (default ~/.cache/paraspec/synthetic/<shape>.<quant>.gguf)",
        )
        p.add_argument("--seed", type=int, default=0)
    m = sub.choices["measure"]
    m.add_argument(
        "--threads",
        type=int,
        default=None,
        help="paraspec's and llama.cpp's threads (default: torch's)",
    )
    m.add_argument("--kernels", default=None, help="a kernel path label (default: the best here)")
    m.add_argument("--activation-passes", default="auto")
    m.add_argument(
        "--context", type=int, default=256, help="cached tokens under the timed forwards"
    )
    m.add_argument("--reps", type=int, default=10, help="timed forwards per k")
    m.add_argument("--prompt-tokens", type=int, default=128)
    m.add_argument("--new-tokens", type=int, default=64)
    m.add_argument("--runs", type=int, default=3, help="AR runs per system (after a warm-up)")
    m.add_argument("--bw-mib", type=int, default=1024, help="MiB summed for the read bandwidth")
    m.add_argument("--no-llamacpp", action="store_true")
    m.add_argument("--no-replay", action="store_true")
    m.add_argument(
        "--records",
        default=None,
        help="replay records (tools/replay.py record); default: recorded once",
    )
    m.add_argument("--tasks", default=",".join(("humaneval", "grounded", "chat", "repeated")))
    m.add_argument("--record-n", type=int, default=10, help="tasks per set when recording")
    m.add_argument("--json", default=None, help="result file (default: <file>.result.json)")
    a = ap.parse_args()
    if a.vocab is not None and a.vocab < 49152:
        ap.error(f"--vocab {a.vocab}: the bundled tokenizer has 49152 tokens; give 49152 or more")
    if a.layers is not None and a.layers < 1:
        ap.error(f"--layers {a.layers}: give 1 or more")
    if a.cmd == "write":
        write(a)
        return
    r = measure(a)
    print_tables(r)
    out = Path(a.json) if a.json else Path(r["file"]).with_suffix(".result.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=1) + "\n")
    print(f"\nresult: {out}")


if __name__ == "__main__":
    main()
