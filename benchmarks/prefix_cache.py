"""Time to first token with the prefix cache off and on, side by side in one process (one engine,
the cache swapped), on the bundled model:

    python benchmarks/prefix_cache.py                       # prefill chunks of 256 (the default) and 64
    python benchmarks/prefix_cache.py --chunks 256 --repeats 1 --out /tmp/prefix_cache.json
    python benchmarks/prefix_cache.py --chunks 256 --system-repeat 8   # a ~2,200-token system prompt

  * conversation: a 5-turn chat (a system prompt, then each user turn sent with every earlier turn
    and answer, as a chat client does); TTFT per turn.
  * system prompt: a fixed ~500-token system prompt before each of --questions different user
    questions; TTFT per question (with the cache on, the first question fills it).
Every greedy answer must be the same with the cache off and on (the script exits 1 otherwise).
The cache reuses whole prefill chunks only (prefix_cache.py), so the chunk size sets how much of
a shared prefix is reused: both sizes run, each with the cache off and on.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys

from paraspec import LLM, SamplingParams
from paraspec.prefix_cache import PrefixCache

SYSTEM = (
    "You are the support assistant of Northwind Traders, a wholesale food distributor. Answer in at most "
    "three sentences, in a friendly and precise tone. Our opening hours are 8am to 6pm, Monday to Friday; "
    "orders placed before noon ship the same day. We deliver to restaurants, shops and hotels in twelve "
    "regions, and a delivery costs nothing above 200 euros. Returns of unopened goods are accepted within "
    "14 days with the invoice number. Fresh produce cannot be returned, but a damaged delivery is refunded "
    "when reported within 24 hours with a photo. Payment is by bank transfer within 30 days, or by card at "
    "ordering. Account managers: Anna for the north, Tomas for the south, Lea for hotels. Never promise a "
    "delivery time on public holidays; say that the planning team will confirm it. If a question is not "
    "about our products, orders, deliveries, invoices or accounts, politely say you can only help with "
    "those. Always end with the customer's order number when they gave one. Product ranges: dairy, "
    "bakery, dry goods, beverages, frozen foods, cleaning supplies and kitchen equipment; seasonal "
    "catalogues come out in March and September. Minimum order: 50 euros. Prices are without VAT. "
)
QUESTIONS = [
    "Can I return a box of pasta I opened?",
    "When will my order 4411 arrive if I order now?",
    "Who manages hotel accounts?",
    "Do you sell kitchen knives?",
    "What does delivery cost for 150 euros?",
    "Can I pay by card?",
    "My milk arrived broken this morning, what do I do?",
    "Are you open on Sunday?",
]
TURNS = [
    "Hi, I run a small bakery. What do you sell that I might need?",
    "What is the minimum order?",
    "If I order flour and butter before noon, when does it ship?",
    "Can I pay by card when I order?",
    "Thanks. Who is my account manager? I am in the south.",
]


def _ttft(
    llm: LLM, messages: list[dict], max_tokens: int
) -> tuple[float, int, int, list[int], str]:
    r = llm.chat(messages, SamplingParams(temperature=0, max_tokens=max_tokens))[0]
    return r.stats["ttft_s"], len(r.prompt_token_ids), r.stats["cached_tokens"], r.token_ids, r.text


def conversation(llm: LLM, max_tokens: int) -> list[dict]:
    messages, out = (
        [{"role": "system", "content": "You are a helpful assistant for a food wholesaler."}],
        [],
    )
    for turn in TURNS:
        messages.append({"role": "user", "content": turn})
        ttft, prompt, cached, tokens, text = _ttft(llm, messages, max_tokens)
        out.append(dict(ttft_s=ttft, prompt_tokens=prompt, cached_tokens=cached, tokens=tokens))
        messages.append({"role": "assistant", "content": text})
    return out


def system_prompt(llm: LLM, max_tokens: int, questions: int, repeat: int = 1) -> list[dict]:
    out, system = [], SYSTEM * repeat
    for q in QUESTIONS[:questions]:
        ttft, prompt, cached, tokens, _ = _ttft(
            llm, [{"role": "system", "content": system}, {"role": "user", "content": q}], max_tokens
        )
        out.append(dict(ttft_s=ttft, prompt_tokens=prompt, cached_tokens=cached, tokens=tokens))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="default")
    ap.add_argument("--chunks", default="256,64", help="prefill chunk sizes (comma-separated)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="runs of each workload per setting (medians over all)",
    )
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=32,
        help="tokens per answer (TTFT is measured; the answers make the conversation grow)",
    )
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--system-repeat",
        type=int,
        default=1,
        help="the system prompt this many times over (8: ~2,200 tokens, a long shared prefix)",
    )
    ap.add_argument("--out", default=None, help="write every measurement as JSON here")
    a = ap.parse_args()
    llm = LLM(a.model, num_threads=a.threads)
    rows, same = [], True
    for chunk in (int(c) for c in a.chunks.split(",")):
        llm.runner.prefill_chunk = chunk
        for workload in ("conversation", "system_prompt"):
            runs: dict[str, list[list[dict]]] = {"off": [], "on": []}
            for _ in range(a.repeats):
                for mode in ("off", "on"):  # interleaved: the machine's drift hits both alike
                    # empty each run
                    llm.engine.prefix_cache = PrefixCache(0 if mode == "off" else 256)
                    runs[mode].append(
                        conversation(llm, a.max_tokens)
                        if workload == "conversation"
                        else system_prompt(llm, a.max_tokens, a.questions, a.system_repeat)
                    )
            same &= all(
                [t["tokens"] for t in r] == [t["tokens"] for t in runs["off"][0]]
                for m in runs.values()
                for r in m
            )
            # the conversation: turns 2-5 (turn 1 has nothing to reuse); the system prompt: questions 2-N
            for mode, rs in runs.items():
                later = [t for r in rs for t in r[1:]]
                rows.append(
                    dict(
                        chunk=chunk,
                        workload=workload,
                        cache=mode,
                        median_ttft_ms=round(
                            1000 * statistics.median(t["ttft_s"] for t in later), 1
                        ),
                        median_prompt_tokens=statistics.median(t["prompt_tokens"] for t in later),
                        median_cached_tokens=statistics.median(t["cached_tokens"] for t in later),
                        per_turn_ttft_ms=[
                            round(1000 * statistics.median(r[i]["ttft_s"] for r in rs), 1)
                            for i in range(len(rs[0]))
                        ],
                    )
                )
                # as it goes: a run cut short keeps its rows
                print(json.dumps(rows[-1]), flush=True)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    print(f"# prefix cache TTFT, {llm.model_name}, {llm.kernels.label}, {cpu}\n")
    print(
        "| chunk | workload | cache | median TTFT ms (turns/questions 2+) | prompt tokens | cached tokens | per turn ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['chunk']} | {r['workload']} | {r['cache']} | {r['median_ttft_ms']} | {r['median_prompt_tokens']} "
            f"| {r['median_cached_tokens']} | {r['per_turn_ttft_ms']} |"
        )
    print(f"\nanswers identical with the cache off and on: {same}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(
                dict(
                    cpu=cpu,
                    kernels=llm.kernels.label,
                    model=llm.model_name,
                    rows=rows,
                    identical=same,
                ),
                f,
                indent=1,
            )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
