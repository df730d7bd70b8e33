"""Prefill (time to first token) on the default model: paraspec's prompt path, the row-invariant
decode attention it replaced for prompts, and transformers' forward, same prompt and dtype, one run.

    python benchmarks/prefill.py [--lengths 128,512,1024,2048] [--repeats 3] [--dtype auto] [--llamacpp] [--model PATH]

paraspec prefills in chunks of ModelRunner.prefill_chunk tokens (256 by default); "row-invariant" runs the
same chunks through forward(prompt=False), the fp64-sum attention that draft verification needs
and a prompt does not. transformers: one forward over the prompt (use_cache=True), logits of the
last position. --llamacpp: llama.cpp (llama-cpp-python, the same GGUF file, the same tokens,
--threads or torch's threads) evaluating the prompt, for TTFT beside the peer users would pick.
Medians of --repeats runs, the systems interleaved so drift hits all alike.

    python benchmarks/prefill.py --roads [--model default] [--kernels avx512:amx] [--threads 2]
        [--activation-passes 1|2] [--sizes 64,128,256,512]
    python benchmarks/prefill.py --attention-roads [--model default] [--contexts 0,1536] [--attention-sizes 64,512]

The roads a prompt chunk takes, on GGUF weights in the model's default numerics (was
prompt_rows.py). --roads: where the dense road starts to pay: forward(prompt=True) over a chunk of
n tokens with the linears on the integer kernel vs dequantised weights through torch's matmul
(ggml.PROMPT_ROWS, the threshold between them). --attention-roads: the same for attention
(attention.PROMPT_ATTENTION_*): the csrc kernel vs torch's prompt_attention, chunks of 16-512 rows after 0-1536 keys.
Medians of interleaved runs. For an AVX2 CPU's torch, set ATEN_CPU_CAPABILITY=avx2
ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 and --kernels avx2:avx2 (an emulation:
quote ratios).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


SIZES = (32, 48, 64, 96, 128, 192, 256)  # --roads: prompt chunk sizes around the threshold


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="128,512,1024,2048")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="paraspec's numerics: auto (the default: the GGUF file's blocks where the kernels run them) "
        "or dense bf16 / fp32 weights; transformers runs bf16 for auto",
    )
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument(
        "--llamacpp",
        action="store_true",
        help="also llama.cpp's prompt evaluation on the same file",
    )
    ap.add_argument(
        "--roads",
        action="store_true",
        help="a chunk's linears: integer kernel vs dense, by chunk size",
    )
    ap.add_argument(
        "--attention-roads", action="store_true", help="a chunk's attention: csrc vs torch, by keys"
    )
    ap.add_argument(
        "--model",
        default="default",
        help="default, a GGUF path, q4_k_m... (a synthetic file's vocabulary "
        "is random: pass --no-transformers)",
    )
    ap.add_argument("--kernels", default="auto", help="a kernel path label (avx2:avx2, ...)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument(
        "--activation-passes",
        default="auto",
        help="with --roads: int8 activation passes (auto, 1, 2)",
    )
    ap.add_argument(
        "--contexts",
        default="0,256,768,1536",
        help="with --attention-roads: cached keys before the chunk",
    )
    ap.add_argument(
        "--attention-sizes",
        default="16,32,64,128,256,512",
        help="with --attention-roads: chunk sizes (rows)",
    )
    ap.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="with --roads: chunk sizes (rows)"
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.roads or args.attention_roads:
        from paraspec import LLM
        from paraspec.model.gguf_requant import bench_model

        llm = LLM(
            bench_model(args.model), kernels=args.kernels, activation_passes=args.activation_passes
        )
        return (attention_roads if args.attention_roads else linear_roads)(llm, args)

    from pathlib import Path

    from paraspec import LLM
    from paraspec.model.gguf_requant import bench_model
    from paraspec.model.loader import default_model_path
    from paraspec.model.transformer import SeqInput

    path = default_model_path() if args.model == "default" else Path(bench_model(args.model))
    llm = (
        LLM(str(path), kernels=args.kernels)
        if args.dtype == "auto"
        else LLM(str(path), dtype=args.dtype, quantization="none", kernels=args.kernels)
    )
    runner, model = llm.runner, llm.model
    hf = None
    if not args.no_transformers:
        import transformers

        hf = transformers.AutoModelForCausalLM.from_pretrained(
            path.parent,
            gguf_file=path.name,
            dtype=getattr(torch, "bfloat16" if args.dtype == "auto" else args.dtype),
        ).eval()
    gen = torch.Generator().manual_seed(0)

    def ours(ids: list[int]) -> float:
        cache = runner.new_cache(len(ids) + 1)
        t0 = time.perf_counter()
        runner.prefill(cache, ids)
        return time.perf_counter() - t0

    def row_invariant(ids: list[int]) -> float:
        cache = runner.new_cache(len(ids) + 1)
        t0 = time.perf_counter()
        for s in range(0, len(ids), runner.prefill_chunk):
            chunk = ids[s : s + runner.prefill_chunk]
            model.forward(
                torch.tensor(chunk),
                torch.arange(cache.length, cache.length + len(chunk)),
                [SeqInput(cache, len(chunk))],
                torch.tensor([len(chunk) - 1]),
            )
            cache.commit(range(len(chunk)))
        return time.perf_counter() - t0

    def theirs(ids: list[int]) -> float:
        with torch.inference_mode():
            t0 = time.perf_counter()
            hf(torch.tensor([ids]), use_cache=True, logits_to_keep=1)
            return time.perf_counter() - t0

    systems = [
        ("paraspec (prompt attention)", ours),
        ("paraspec, row-invariant attention", row_invariant),
    ]
    if hf is not None:
        systems.append(("transformers forward", theirs))
    if args.llamacpp:
        from llama_cpp import Llama

        peer = Llama(
            model_path=str(path),
            n_ctx=max(int(x) for x in args.lengths.split(",")) + 64,
            n_threads=torch.get_num_threads(),
            n_batch=512,
            verbose=False,
        )

        def llamacpp(ids: list[int]) -> float:
            peer.reset()
            t0 = time.perf_counter()
            peer.eval(ids)
            return time.perf_counter() - t0

        systems.append(("llama.cpp eval", llamacpp))
    lengths = [int(x) for x in args.lengths.split(",")]
    print(
        f"model {llm.model_name}, {llm.config.dtype} + {llm.config.quantization}, kernels {llm.model.kernels.label}, threads {torch.get_num_threads()}, "
        f"{args.repeats} repeats (median), seconds"
    )
    print("| prompt tokens | " + " | ".join(n for n, _ in systems) + " | row-invariant / prompt |")
    print("|---" * (len(systems) + 2) + "|")
    for n in lengths:
        ids = torch.randint(100, model.args.vocab_size - 100, (n,), generator=gen).tolist()
        for _, f in systems:
            f(ids[:64])  # warm-up
        times: dict[str, list[float]] = {name: [] for name, _ in systems}
        for _ in range(args.repeats):
            for name, f in systems:
                times[name].append(f(ids))
        med = {name: statistics.median(v) for name, v in times.items()}
        first, second = systems[0][0], systems[1][0]
        print(
            f"| {n} | "
            + " | ".join(f"{med[name]:.3f}" for name, _ in systems)
            + f" | {med[second] / med[first]:.2f}x |",
            flush=True,
        )


def linear_roads(llm, a) -> None:
    from paraspec.model import ggml
    from paraspec.model.transformer import SeqInput

    m, saved = llm.model, dict(ggml.PROMPT_ROWS)
    print(
        f"{a.model}: {llm.config.dtype} + {llm.config.quantization}, kernels {m.kernels.label}, {torch.get_num_threads()} threads; "
        f"dense from {ggml.prompt_rows(m.kernels, m.activation_passes)} rows"
    )
    for n in (int(x) for x in a.sizes.split(",")):
        times: dict[str, list[float]] = {"dense": [], "kernel": []}
        for _ in range(a.repeats):
            for road, rows in (("dense", 1), ("kernel", 10**9)):
                ggml.PROMPT_ROWS.update({v: rows for v in saved})
                cache = m.new_cache(n + 8)
                t0 = time.perf_counter()
                m.forward(
                    torch.randint(100, 1000, (n,)),
                    torch.arange(n),
                    [SeqInput(cache, n)],
                    torch.tensor([n - 1]),
                    prompt=True,
                )
                times[road].append(time.perf_counter() - t0)
        ggml.PROMPT_ROWS.update(saved)
        d, k = (statistics.median(times[r]) * 1e3 for r in ("dense", "kernel"))
        print(f"n={n:4d}  dense {d:7.1f} ms  kernel {k:7.1f} ms  kernel/dense {k / d:.2f}")


def attention_roads(llm, a) -> None:
    from paraspec.model import attention
    from paraspec.model.transformer import SeqInput

    m, reps = llm.model, a.repeats
    saved = dict(attention.PROMPT_ATTENTION_ROWS), attention.PROMPT_ATTENTION_KEYS
    for ctx in (int(x) for x in a.contexts.split(",")):
        for n in (int(x) for x in a.attention_sizes.split(",")):
            times: dict[str, list[float]] = {"torch": [], "csrc": []}
            cache = m.new_cache(ctx + n + 8)
            if ctx:
                m.forward(
                    torch.randint(100, 1000, (ctx,)),
                    torch.arange(ctx),
                    [SeqInput(cache, ctx)],
                    torch.tensor([ctx - 1]),
                    prompt=True,
                )
                cache.commit(range(ctx))
            for _ in range(reps):
                for road in times:
                    limit = 0 if road == "torch" else 10**9
                    attention.PROMPT_ATTENTION_ROWS = {isa: limit for isa in saved[0]}
                    attention.PROMPT_ATTENTION_KEYS = limit
                    t0 = time.perf_counter()
                    m.forward(
                        torch.randint(100, 1000, (n,)),
                        torch.arange(ctx, ctx + n),
                        [SeqInput(cache, n)],
                        torch.tensor([n - 1]),
                        prompt=True,
                    )
                    times[road].append(time.perf_counter() - t0)
                    cache.commit([])  # the chunk's rows dropped again
            attention.PROMPT_ATTENTION_ROWS, attention.PROMPT_ATTENTION_KEYS = saved
            t, c = (statistics.median(times[r]) * 1e3 for r in ("torch", "csrc"))
            print(
                f"after {ctx:4d} keys, n={n:4d}  torch {t:7.1f} ms  csrc {c:7.1f} ms  csrc/torch {c / t:.2f}"
            )


if __name__ == "__main__":
    main()
