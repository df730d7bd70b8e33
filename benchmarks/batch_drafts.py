"""Drafts in a batch: a drafter against plain decoding when several requests share each forward.

    python benchmarks/batch_drafts.py --model qwen2.5-coder-0.5b --plugin hybrid --batch 1,4,16
                                      [--tokens 128] [--repeats 3] [--out FILE]

At one row a draft row is nearly free (the weights are read once for all rows); in a batch the
other requests' rows are already on the cost curve, and a draft row's time delays every request
of the forward. This measures whether a drafter still pays there: for each batch size B, the same
B held-out ShareGPT requests (the bench's `sharegpt` set, `paraspec fetch sharegpt`: a seeded
sample of those whose prompt, the conversation so far in the chat template, is at most
--prompt-tokens long) decoded greedily as one batch by plain decoding and by the drafter, in turns, --repeats
times in one engine, each time B other requests (the drafter's memory warm after the first turn,
as in a server, but with no earlier answer to the same request to copy). Reported
per B: total tokens / s of each, their ratio (median over repeats, and each repeat's), forwards
per token, and whether the drafter's tokens were plain decoding's (they must be).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from paraspec import LLM, SamplingParams


def prompts(llm: LLM, n: int, most_tokens: int, seed: int = 0) -> list[list[dict]]:
    """n conversations whose prompt is at most most_tokens long (the prefill, the same for both
    sides, would otherwise dilute the ratio)."""
    from paraspec.bench.workload_tasks import seeded_sample, sharegpt

    convs = [t.messages for t in seeded_sample(sharegpt(), None, seed)]
    return [c for c in convs if len(llm.tokenizer.encode_chat(c)) <= most_tokens][:n]


def run(
    llm: LLM, convs: list, params: SamplingParams, plugin: str | None
) -> tuple[float, list, int]:
    t0 = time.perf_counter()
    outs = llm.chat(convs, params, plugin)
    wall = time.perf_counter() - t0
    return wall, [o.token_ids for o in outs], sum(o.stats.get("forward_passes", 0) for o in outs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--plugin", default="hybrid", help="plugin_type, or a plugin_params JSON")
    ap.add_argument("--batch", default="1,4,16")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=256, help="the longest prompt taken")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    plugin = a.plugin if a.plugin.startswith("{") else json.dumps({"plugin_type": a.plugin})
    llm = LLM(a.model)
    params = SamplingParams(temperature=0, max_tokens=a.tokens, ignore_eos=True)
    sizes = [int(b) for b in a.batch.split(",")]
    convs = prompts(llm, max(sizes) * (a.repeats + 1), a.prompt_tokens)
    llm.chat(convs[:1], SamplingParams(temperature=0, max_tokens=4))  # one-time costs
    from paraspec.model import kernels

    report = {
        "model": a.model,
        "plugin": plugin,
        "tokens": a.tokens,
        "machine": platform.processor(),
        "kernels": kernels.default().name,
        "batches": {},
    }
    for b in sizes:
        ratios, same, rows = [], True, []
        for r in range(a.repeats + 1):  # the first turn warms the drafter; not counted
            batch = convs[r * b : (r + 1) * b]  # requests it has not seen: no answer to copy
            ar_s, ar_tok, ar_fw = run(llm, batch, params, None)
            pd_s, pd_tok, pd_fw = run(llm, batch, params, plugin)
            same &= ar_tok == pd_tok
            n = sum(len(t) for t in ar_tok)
            if r:
                ratios.append(ar_s / pd_s)
                rows.append(
                    {
                        "ar_tok_s": round(n / ar_s, 2),
                        "pd_tok_s": round(n / pd_s, 2),
                        "ar_forwards_per_token": round(ar_fw / n, 3),
                        "pd_forwards_per_token": round(pd_fw / n, 3),
                    }
                )
        report["batches"][b] = {
            "ratio_median": round(statistics.median(ratios), 3),
            "ratios": [round(x, 3) for x in ratios],
            "identical": same,
            "repeats": rows,
        }
        print(
            f"batch {b:3d}: {a.plugin} / AR {statistics.median(ratios):.3f} (each {[round(x, 3) for x in ratios]}), "
            f"AR {rows[-1]['ar_tok_s']} tok/s, forwards/token {rows[-1]['pd_forwards_per_token']}, "
            f"identical {same}",
            flush=True,
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if all(v["identical"] for v in report["batches"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
