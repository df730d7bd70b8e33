"""Where a prompt chunk's dense road starts to pay on GGUF weights: forward(prompt=True) over a chunk
of n tokens with the linears on the integer kernel vs dequantised weights through torch's matmul
(ggml.PROMPT_ROWS, the threshold between them), per kernel path, medians of interleaved runs:

    python benchmarks/prompt_rows.py [--model default] [--threads 2] [--kernels avx512:amx]
    python benchmarks/prompt_rows.py --attention     # the same for attention (transformer.PROMPT_ATTENTION_*):
                                                     # the csrc kernel vs torch's prompt_attention, after 0-768 keys

For an AVX2 CPU's torch, set ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
and --kernels avx2:avx2 (an emulation: quote ratios).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from paraspec import LLM
from paraspec.model import ggml, transformer
from paraspec.model.transformer import SeqInput

SIZES = (32, 48, 64, 96, 128, 192, 256)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kernels", default="auto")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--attention", action="store_true", help="time the prompt attention's two roads instead")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    llm = LLM(a.model, kernels=a.kernels)
    if a.attention:
        return attention_roads(llm.model, a.reps)
    m, saved = llm.model, dict(ggml.PROMPT_ROWS)
    print(f"{a.model}: {llm.config.dtype} + {llm.config.quantization}, kernels {a.kernels}, {a.threads} threads; "
          f"dense from {ggml.prompt_rows(m.kernels)} rows")
    for n in SIZES:
        times: dict[str, list[float]] = {"dense": [], "kernel": []}
        for _ in range(a.reps):
            for road, rows in (("dense", 1), ("kernel", 10 ** 9)):
                ggml.PROMPT_ROWS.update({v: rows for v in saved})
                cache = m.new_cache(n + 8)
                t0 = time.perf_counter()
                m.forward(torch.randint(100, 1000, (n,)), torch.arange(n), [SeqInput(cache, n)],
                          torch.tensor([n - 1]), prompt=True)
                times[road].append(time.perf_counter() - t0)
        ggml.PROMPT_ROWS.update(saved)
        d, k = (statistics.median(times[r]) * 1e3 for r in ("dense", "kernel"))
        print(f"n={n:4d}  dense {d:7.1f} ms  kernel {k:7.1f} ms  kernel/dense {k / d:.2f}")


def attention_roads(m, reps: int) -> None:
    saved = transformer.PROMPT_ATTENTION_ROWS, transformer.PROMPT_ATTENTION_KEYS
    for ctx in (0, 256, 768):
        for n in (16, 32, 64, 128, 256):
            times: dict[str, list[float]] = {"torch": [], "csrc": []}
            cache = m.new_cache(ctx + n + 8)
            if ctx:
                m.forward(torch.randint(100, 1000, (ctx,)), torch.arange(ctx), [SeqInput(cache, ctx)],
                          torch.tensor([ctx - 1]), prompt=True)
                cache.commit(range(ctx))
            for _ in range(reps):
                for road in times:
                    limit = 0 if road == "torch" else 10 ** 9
                    transformer.PROMPT_ATTENTION_ROWS = transformer.PROMPT_ATTENTION_KEYS = limit
                    t0 = time.perf_counter()
                    m.forward(torch.randint(100, 1000, (n,)), torch.arange(ctx, ctx + n), [SeqInput(cache, n)],
                              torch.tensor([n - 1]), prompt=True)
                    times[road].append(time.perf_counter() - t0)
                    cache.commit([])          # the chunk's rows dropped again
            transformer.PROMPT_ATTENTION_ROWS, transformer.PROMPT_ATTENTION_KEYS = saved
            t, c = (statistics.median(times[r]) * 1e3 for r in ("torch", "csrc"))
            print(f"after {ctx:4d} keys, n={n:4d}  torch {t:7.1f} ms  csrc {c:7.1f} ms  csrc/torch {c / t:.2f}")


if __name__ == "__main__":
    main()
