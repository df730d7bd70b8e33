"""`paraspec aspd judge`: two variants' answers to the same prompts, judged pairwise by a larger
local model (MT-Bench's pairwise protocol, without reference answers).

Each pair is judged twice, the answers' positions swapped; a verdict is read from the judge's
probabilities of answering "A" or "B" first. Two outcomes are reported: by letters, a variant
wins a prompt only when both orders pick it and orders that disagree are a tie (the share of
prompts whose two orders agree says how far the judge agrees with itself); by margin, the log
ratio P(A) / P(B) averaged over both orders, which cancels a constant preference for one place
(small judges have a strong one). Pairs whose two answers are the same text are ties, unjudged.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from .paths import DATA_DIR

SYSTEM = (
    "You are an impartial judge of AI assistants' answers. Judge which answer serves the "
    "user better: correct, helpful, relevant, clear, and not repetitive. Ignore the order "
    "in which the answers are shown and their length as such."
)
MAX_CHARS = 3000  # an answer or a turn beyond this is cut: the judge's context stays small
TOP_LOGPROBS = 20


@dataclass
class Pair:
    id: str
    messages: list[dict]  # the conversation the answers reply to
    a: str
    b: str


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + " [...]"


def judge_messages(pair: Pair, first: str, second: str) -> list[dict]:
    turns = "\n\n".join(
        f"[{m['role'].capitalize()}]\n{_cut(m['content'])}" for m in pair.messages[-3:]
    )
    return [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": f"[The conversation]\n{turns}\n\n[Answer A]\n{_cut(first)}\n\n"
            f"[Answer B]\n{_cut(second)}\n\n"
            "Which answer is better? Reply with one letter: A or B.",
        },
    ]


def letter_ids(tokenizer) -> tuple[int, int]:
    ids = [tokenizer.encode(c) for c in ("A", "B")]
    if any(len(i) != 1 for i in ids):
        raise SystemExit(
            "--judge-model: its tokenizer spells 'A' or 'B' in more than one token; pick another judge"
        )
    return ids[0][0], ids[1][0]


def margin(llm, messages: list[dict], ids: tuple[int, int]) -> tuple[str, float]:
    """The judge's first-token letter and log P(A) - log P(B) (a letter outside the top
    TOP_LOGPROBS counts at the least log-probability shown)."""
    from ..sampling.params import SamplingParams

    out = llm.chat(messages, SamplingParams(temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS))[
        0
    ]
    top = dict(out.outputs[0].logprobs[0].top)
    floor = min(top.values())
    la, lb = top.get(ids[0], floor), top.get(ids[1], floor)
    return ("A" if la >= lb else "B"), la - lb


def verdicts(llm, pairs: list[Pair], log=print) -> list[dict]:
    """Per pair: the letter the judge puts first with `a` shown first and with `b` shown first,
    the outcome by letters ("a", "b", or "tie" where the orders disagree) and by the margin
    averaged over both orders, which cancels a constant preference for a position."""
    ids = letter_ids(llm.tokenizer)
    out = []
    t0 = time.perf_counter()
    for i, p in enumerate(pairs):
        if p.a.strip() == p.b.strip():
            out.append(
                {
                    "id": p.id,
                    "a_first": None,
                    "b_first": None,
                    "outcome": "tie",
                    "margin": 0.0,
                    "outcome_by_margin": "tie",
                    "same_text": True,
                }
            )
            continue
        a_first, m1 = margin(llm, judge_messages(p, p.a, p.b), ids)
        b_first, m2 = margin(llm, judge_messages(p, p.b, p.a), ids)
        # with `b` shown first, "B" names `a`
        pick_1 = "a" if a_first == "A" else "b"
        pick_2 = "a" if b_first == "B" else "b"
        m = (m1 - m2) / 2  # > 0: the judge prefers `a`, whichever place it is shown in
        out.append(
            {
                "id": p.id,
                "a_first": a_first,
                "b_first": b_first,
                "outcome": pick_1 if pick_1 == pick_2 else "tie",
                "margin": round(m, 4),
                "outcome_by_margin": "a" if m > 0 else "b" if m < 0 else "tie",
                "same_text": False,
            }
        )
        if (i + 1) % 10 == 0:
            log(f"judged {i + 1}/{len(pairs)} ({time.perf_counter() - t0:.0f} s)")
    return out


def summary(rows: list[dict]) -> dict:
    judged = [r for r in rows if not r["same_text"]]
    wins = {k: sum(r["outcome"] == k for r in rows) for k in ("a", "b", "tie")}
    by_margin = {k: sum(r["outcome_by_margin"] == k for r in rows) for k in ("a", "b", "tie")}
    agree = sum(r["outcome"] != "tie" for r in judged)
    a_letter = sum((r["a_first"] == "A") + (r["b_first"] == "A") for r in judged)
    return {
        "n": len(rows),
        "same_text": len(rows) - len(judged),
        **wins,
        "a_win_rate": (wins["a"] + 0.5 * wins["tie"]) / len(rows) if rows else None,
        "by_margin": by_margin,
        "a_win_rate_by_margin": (by_margin["a"] + 0.5 * by_margin["tie"]) / len(rows)
        if rows
        else None,
        "self_agreement": agree / len(judged) if judged else None,
        "first_letter_share": a_letter / (2 * len(judged)) if judged else None,
    }


def pairs_from_report(report: dict, a: str, b: str, sharegpt_data: Path) -> dict[str, list[Pair]]:
    """The pairs of an `aspd eval --out` report, per set (sharegpt, mtbench), with the
    conversations the answers replied to."""
    from .eval_prompts import mtbench_first_turns, sharegpt_heldout

    sets = {}
    for name in ("sharegpt", "mtbench"):
        section = report.get(name)
        if not section:
            continue
        answers = section["answers"]
        if a not in answers or b not in answers:
            raise SystemExit(
                f"--a/--b: the report's {name} set has {', '.join(answers)}; pick two of them"
            )
        examples = (
            sharegpt_heldout(sharegpt_data, len(answers[a]))
            if name == "sharegpt"
            else mtbench_first_turns(len(answers[a]))
        )
        convs = {e.id: e.messages for e in examples}
        by_id = {r["id"]: r["text"] for r in answers[b]}
        sets[name] = [
            Pair(r["id"], convs[r["id"]], r["text"], by_id[r["id"]])
            for r in answers[a]
            if r["id"] in convs and r["id"] in by_id
        ]
    if not sets:
        raise SystemExit(
            "--report: no sharegpt or mtbench set in it (write one with `aspd eval --out`)"
        )
    return sets


def add_parser(s) -> None:
    j = s.add_parser(
        "judge",
        help="two variants' answers in an `aspd eval --out` report, judged pairwise "
        "by a larger local model, positions swapped",
    )
    j.add_argument("--report", required=True, help="an `aspd eval --out` JSON report")
    j.add_argument(
        "--judge-model", default="qwen2.5-coder-1.5b", help="the judge (a catalog name or a path)"
    )
    j.add_argument("--a", default="aspd", help="the first variant (default aspd)")
    j.add_argument("--b", default="control", help="the second variant (default control)")
    j.add_argument(
        "--sharegpt-data",
        default=str(DATA_DIR / "heldout_sharegpt.jsonl"),
        help="the held-out ShareGPT turns the report's sharegpt set answered",
    )
    j.add_argument(
        "--n", type=int, default=0, help="judge only the first n pairs of each set (0: all)"
    )
    j.add_argument("--threads", type=int, default=1)
    j.add_argument("--out", default=None, help="also write every verdict (JSON) here")
    j.set_defaults(func=judge_main)


def judge_main(args: argparse.Namespace) -> int:
    from ..api import LLM

    report = json.loads(Path(args.report).read_text(encoding="utf-8"))
    sets = pairs_from_report(report, args.a, args.b, Path(args.sharegpt_data))
    llm = LLM(model=args.judge_model, num_threads=args.threads)
    result = {"judge_model": args.judge_model, "a": args.a, "b": args.b, "sets": {}}
    for name, pairs in sets.items():
        rows = verdicts(
            llm,
            pairs[: args.n] if args.n else pairs,
            log=lambda m, s=name: print(f"[{s}] {m}", flush=True),
        )
        result["sets"][name] = {"summary": summary(rows), "verdicts": rows}
        print(json.dumps({"set": name, **result["sets"][name]["summary"]}), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0
