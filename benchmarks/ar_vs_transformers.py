"""paraspec autoregressive decode vs transformers `generate`, same model, prompt and dtype, one run.

    python benchmarks/ar_vs_transformers.py [--dtype bfloat16] [--new-tokens 128] [--repeats 3]

Decode tokens/s = (new tokens - 1) / (time after the first token). For transformers the first
token's time is measured by a separate generate(max_new_tokens=1) on the same prompt. Medians of
`--repeats` runs, alternating the two systems so drift hits both alike.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

PROMPT = [{"role": "user", "content": "Explain how a hash table works, with a short Python example."}]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers
    from paraspec import LLM, SamplingParams
    from paraspec.model.loader import default_model_path

    llm = LLM(dtype=args.dtype)
    ids = llm.tokenizer.encode_chat(PROMPT)
    path = default_model_path()
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                           dtype=getattr(torch, args.dtype)).eval()
    n = args.new_tokens
    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)

    def run_paraspec() -> float:
        s = llm.generate([ids], params)[0].stats
        return s["tokens_per_s"]

    def run_hf() -> float:
        x = torch.tensor([ids])
        with torch.inference_mode():
            t0 = time.perf_counter()
            hf.generate(x, max_new_tokens=1, do_sample=False)
            t_first = time.perf_counter() - t0
            t0 = time.perf_counter()
            out = hf.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False)
            total = time.perf_counter() - t0
        assert out.shape[1] - x.shape[1] == n
        return (n - 1) / (total - t_first)

    run_paraspec(), run_hf()  # warm-up
    ours, theirs = [], []
    for _ in range(args.repeats):
        ours.append(run_paraspec())
        theirs.append(run_hf())
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"model {llm.model_name}, dtype {args.dtype}, prompt {len(ids)} tokens, {n} new tokens, "
          f"threads {torch.get_num_threads()}, {args.repeats} repeats (median)")
    print("| system | decode tokens/s | runs |")
    print("|---|---|---|")
    print(f"| paraspec AR | {mo:.1f} | {', '.join(f'{v:.1f}' for v in ours)} |")
    print(f"| transformers generate | {mt:.1f} | {', '.join(f'{v:.1f}' for v in theirs)} |")
    print(f"ratio paraspec / transformers: {mo / mt:.2f}x")


if __name__ == "__main__":
    main()
