"""Schema-constrained extraction with the bundled model: decode tok/s and tokens per step, plain
decoding and memory_decoding, with and without the grammar's forced drafts, against the same
prompts unconstrained. Greedy; every constrained output is checked to parse and fit the schema,
and every constrained run's tokens against the constrained plain run's (lossless).

    python benchmarks/structured.py [--n 6] [--max-tokens 96] [--threads 2] [--out results.json]

tok/s is decode tokens over decode seconds, summed over the prompts (the first token, which the
prefill gives, is not counted); tokens/step is decode tokens over decode steps.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

from paraspec import LLM, SamplingParams
from paraspec.structured.params import StructuredOutputsParams

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age", "city", "occupation", "skills"],
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"type": "string", "maxLength": 40},
        "occupation": {"type": "string", "maxLength": 40},
        "skills": {"type": "array", "maxItems": 4, "items": {"type": "string", "maxLength": 30}},
    },
}
PEOPLE = [
    "Maria Lopez is a 34-year-old nurse from Madrid who speaks Spanish and English and plays the violin.",
    "Kenji Sato, 52, works as a civil engineer in Osaka. He is known for bridge design and project management.",
    "At 27, Amara Okafor writes software in Lagos; she knows Python, Rust and distributed systems.",
    "Lukas Novak (41) teaches history at a school in Prague and coaches the chess club on weekends.",
    "Priya Raman is a 29-year-old data analyst in Bangalore skilled in SQL, statistics and dashboards.",
    "Tom Becker, a 63-year-old carpenter from Hamburg, builds furniture and restores old boats.",
    "Sofia Rossi, 38, is a chef in Naples who specialises in pizza, pastry and seafood.",
    "Ahmed Hassan is a 45-year-old pilot from Cairo who flies cargo planes and speaks four languages.",
]
KEYS = ", ".join(SCHEMA["required"])


def messages(text: str) -> list[dict]:
    return [
        {"role": "user", "content": f"Extract the person as JSON with the keys {KEYS}.\n\n{text}"}
    ]


def valid(text: str) -> bool:
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(doc, dict)
        and set(doc) == set(SCHEMA["required"])
        and type(doc["age"]) is int
        and all(isinstance(doc[k], str) for k in ("name", "city", "occupation"))
        and isinstance(doc["skills"], list)
        and all(isinstance(s, str) for s in doc["skills"])
    )


def run(llm: LLM, convs: list, params: SamplingParams, plugin: str | None) -> dict:
    tokens = steps = forced = 0
    decode_s = 0.0
    outs = []
    for conv in convs:  # one at a time: batch 1, each request's own steps
        out = llm.chat(conv, params, plugin_params=plugin or "")[0]
        s = out.stats
        tokens += max(s["generated_tokens"] - 1, 0)
        steps += s["decode_steps"]
        decode_s += s["decode_s"]
        forced += s.get("accepted_forced_tokens", 0)
        outs.append(out)
    return {
        "tok_s": round(tokens / decode_s, 1) if decode_s else 0.0,
        "tokens_per_step": round(tokens / steps, 2) if steps else 0.0,
        "decode_tokens": tokens,
        "steps": steps,
        "accepted_forced_tokens": forced,
        "valid": sum(valid(o.text) for o in outs),
        "token_ids": [o.token_ids for o in outs],
        "example": outs[0].text,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=6, help="prompts (at most %d)" % len(PEOPLE))
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    llm = LLM(num_threads=args.threads)
    convs = [messages(t) for t in PEOPLE[: args.n]]
    memory = json.dumps({"plugin_type": "memory_decoding", "decoding_length": 16})

    def constrained(forced: bool) -> SamplingParams:
        return SamplingParams(
            temperature=0,
            max_tokens=args.max_tokens,
            structured_outputs=StructuredOutputsParams(json=SCHEMA, forced_drafts=forced),
        )

    plain = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    llm.chat(convs[0], constrained(True))  # warm-up: the grammar library's index, the kernels
    runs = [
        ("unconstrained", "AR", plain, None),
        ("schema, no forced drafts", "AR", constrained(False), None),
        ("schema, forced drafts", "AR", constrained(True), None),
        ("unconstrained", "memory_decoding", plain, memory),
        ("schema, no forced drafts", "memory_decoding", constrained(False), memory),
        ("schema, forced drafts", "memory_decoding", constrained(True), memory),
    ]
    t0 = time.time()
    print(
        f"{platform.processor() or platform.machine()}, {args.threads} threads, {args.n} prompts, "
        f"max_tokens {args.max_tokens}\n"
    )
    print(
        "| output | decoding | tok/s | tokens/step | steps | forced tokens accepted | valid JSON | same tokens |"
    )
    print("|---|---|---|---|---|---|---|---|", flush=True)
    results = []
    for label, system, params, plugin in runs:
        # memory_decoding's trie remembers past outputs: each of its runs starts with an empty one
        r = {
            "output": label,
            "decoding": system,
            **run(LLM(num_threads=args.threads) if plugin else llm, convs, params, plugin),
        }
        results.append(r)
        same = (
            "-"
            if label == "unconstrained"
            else ("yes" if r["token_ids"] == results[1]["token_ids"] else "NO")
        )
        print(
            f"| {label} | {system} | {r['tok_s']} | {r['tokens_per_step']} | {r['steps']} | "
            f"{r['accepted_forced_tokens']} | {r['valid']}/{args.n} | {same} |",
            flush=True,
        )
    print(f"\n{time.time() - t0:.0f} s")
    print("example:", results[2]["example"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "args": vars(args),
                    "results": [{k: v for k, v in r.items() if k != "token_ids"} for r in results],
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
