"""Plain decoding with a GGUF model's layer loop in one csrc call (the engine's default,
gguf_decoder.py) against the same loop in Python (transformer.forward's reference), interleaved
in one process so that the machine's drift hits both alike; greedy outputs must be identical:

    python benchmarks/decoder_loop.py [--model default] [--tasks humaneval] [--n 4] [--rounds 4]
                                      [--tokens 96] [--threads 2]

Prints each side's median decode time per token (the engine's decode_s over the tokens after
the first) and their ratio.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from paraspec import LLM, SamplingParams
from paraspec.bench.tasks import load_task_set


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--tasks", default="humaneval")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    llm = LLM(args.model)
    model = llm.runner.model
    fused = model.decoder
    if fused is None:
        raise SystemExit(f"{args.model}: no csrc layer loop here (not GGUF on the compiled kernels)")
    prompts = [t.prompt_ids(llm.tokenizer) for name in args.tasks.split(",") for t in load_task_set(name, args.n, 0)]
    params = SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True)
    per_token: dict[str, list[float]] = {"csrc loop": [], "python loop": []}
    outputs: dict[str, list[list[int]]] = {k: [] for k in per_token}
    sides = [("csrc loop", fused), ("python loop", None)]
    for r in range(args.rounds):
        for name, decoder in sides if r % 2 == 0 else sides[::-1]:
            model.decoder = decoder
            for ids in prompts:
                out = llm.generate([ids], params)[0]
                per_token[name].append(out.stats["decode_s"] / (out.stats["generated_tokens"] - 1))
                outputs[name].append(out.token_ids)
    model.decoder = fused
    same = outputs["csrc loop"] == outputs["python loop"]
    med = {k: statistics.median(v) * 1e3 for k, v in per_token.items()}
    print(f"{model.kernels.label}, {args.threads} thread(s), {len(prompts)} prompts x {args.rounds} rounds, "
          f"{args.tokens} tokens: " + ", ".join(f"{k} {v:.2f} ms/token" for k, v in med.items())
          + f"; python / csrc {med['python loop'] / med['csrc loop']:.3f}; outputs identical: {same}")


if __name__ == "__main__":
    main()
