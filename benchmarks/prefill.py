"""Prefill (time to first token) on the default model: paraspec's prompt path, the row-invariant
decode attention it replaced for prompts, and transformers' forward, same prompt and dtype, one run.

    python benchmarks/prefill.py [--lengths 128,512,1024,2048] [--repeats 3] [--dtype bfloat16]

paraspec prefills in chunks of 512 tokens (ModelRunner.prefill_chunk); "row-invariant" runs the
same chunks through forward(prompt=False), the fp64-sum attention that draft verification needs
and a prompt does not. transformers: one forward over the prompt (use_cache=True), logits of the
last position. Medians of --repeats runs, the three systems interleaved so drift hits all alike.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="128,512,1024,2048")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--no-transformers", action="store_true")
    args = ap.parse_args()

    from paraspec import LLM
    from paraspec.model.loader import default_model_path
    from paraspec.model.transformer import SeqInput

    llm = LLM(dtype=args.dtype)
    runner, model = llm.runner, llm.model
    hf = None
    if not args.no_transformers:
        import transformers
        path = default_model_path()
        hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                               dtype=getattr(torch, args.dtype)).eval()
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
            chunk = ids[s:s + runner.prefill_chunk]
            model.forward(torch.tensor(chunk), torch.arange(cache.length, cache.length + len(chunk)),
                          [SeqInput(cache, len(chunk))], torch.tensor([len(chunk) - 1]))
            cache.commit(range(len(chunk)))
        return time.perf_counter() - t0

    def theirs(ids: list[int]) -> float:
        with torch.inference_mode():
            t0 = time.perf_counter()
            hf(torch.tensor([ids]), use_cache=True, logits_to_keep=1)
            return time.perf_counter() - t0

    systems = [("paraspec (prompt attention)", ours), ("paraspec, row-invariant attention", row_invariant)]
    if hf is not None:
        systems.append(("transformers forward", theirs))
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"model {llm.model_name}, dtype {args.dtype}, threads {torch.get_num_threads()}, "
          f"{args.repeats} repeats (median), seconds")
    print("| prompt tokens | " + " | ".join(n for n, _ in systems) + " | row-invariant / prompt |")
    print("|---" * (len(systems) + 2) + "|")
    for n in lengths:
        ids = torch.randint(100, model.args.vocab_size - 100, (n,), generator=gen).tolist()
        for _, f in systems:
            f(ids[:64])    # warm-up
        times: dict[str, list[float]] = {name: [] for name, _ in systems}
        for _ in range(args.repeats):
            for name, f in systems:
                times[name].append(f(ids))
        med = {name: statistics.median(v) for name, v in times.items()}
        first, second = systems[0][0], systems[1][0]
        print(f"| {n} | " + " | ".join(f"{med[name]:.3f}" for name, _ in systems)
              + f" | {med[second] / med[first]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
