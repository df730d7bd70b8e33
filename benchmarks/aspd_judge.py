"""The ASPD extraction judges against hand labels: does each judge call a candidate block
independent exactly when a person does? Reads benchmarks/aspd_judge_labels.json (blocks labelled
independent / dependent) and reports, per judge, precision, recall and accuracy, with
"independent" (the judge accepts the block as parallel) as the positive class, under the
pipeline's rule (n votes, unanimous unless --majority).

    python benchmarks/aspd_judge.py [--judges rule,llm,rule+llm] [--votes 3] [--json out.json]

Precision is what matters most for training data: a dependent block accepted as parallel teaches
the model to write siblings that cannot be written apart. `llm` is the bundled model through
judge.LLMJudge (skipped with a message when it does not load).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from paraspec.aspd import judge
from paraspec.aspd.data import Block, Branch

LABELS = Path(__file__).with_name("aspd_judge_labels.json")


def load(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["items"]


def scores(truth: list[bool], said: list[bool]) -> dict:
    tp = sum(t and s for t, s in zip(truth, said))
    fp = sum(s and not t for t, s in zip(truth, said))
    fn = sum(t and not s for t, s in zip(truth, said))
    return {
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "accuracy": sum(t == s for t, s in zip(truth, said)) / len(truth),
        "accepted": tp + fp,
        "dependent_accepted": fp,
        "independent_rejected": fn,
    }


def judge_named(name: str, llm_judge):
    return {
        "rule": judge.RuleJudge,
        "llm": lambda: llm_judge,
        "rule+llm": lambda: judge.BothJudges(llm_judge),
    }[name]()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--labels", default=str(LABELS))
    ap.add_argument("--judges", default="rule,llm,rule+llm")
    ap.add_argument("--votes", type=int, default=3)
    ap.add_argument("--majority", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    items = load(Path(args.labels))
    truth = [it["label"] == "independent" for it in items]
    names = [n.strip() for n in args.judges.split(",") if n.strip()]
    llm_judge = None
    if any(n != "rule" for n in names):
        try:
            import torch

            from paraspec import LLM
            from paraspec.errors import ModelLoadError

            torch.set_num_threads(args.threads)
            llm_judge = judge.LLMJudge(LLM("default"))
        except (ImportError, ModelLoadError) as e:
            print(f"llm: the bundled model did not load ({e}); skipping llm and rule+llm")
            names = [n for n in names if n == "rule"]
    results = {
        "labels": str(args.labels),
        "items": len(items),
        "independent": sum(truth),
        "votes": args.votes,
        "unanimous": not args.majority,
        "machine": platform.processor() or platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
        "judges": {},
    }
    print(
        f"{len(items)} labelled blocks ({sum(truth)} independent), {args.votes} votes, "
        f"{'majority' if args.majority else 'unanimous'}"
    )
    for name in names:
        j = judge_named(name, llm_judge)
        t0 = time.perf_counter()
        said, yes = [], 0
        for it in items:
            block = Block(tuple(Branch(b["title"], b["content"]) for b in it["branches"]))
            votes = j.independent(it["question"], it["precondition"], block, args.votes)
            said.append(judge.accept(votes, not args.majority))
            yes += sum(votes)
        s = scores(truth, said)
        s["yes_votes"] = f"{yes}/{len(items) * args.votes}"
        s["seconds"] = round(time.perf_counter() - t0, 1)
        s["wrong"] = [it["id"] + " " + it["kind"] for it, t, d in zip(items, truth, said) if t != d]
        results["judges"][name] = s
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(
            f"{name:9s} precision {fmt(s['precision'])}  recall {fmt(s['recall'])}  accuracy {fmt(s['accuracy'])}"
            f"  (accepted {s['accepted']}, dependent accepted {s['dependent_accepted']}, "
            f"independent rejected {s['independent_rejected']}; yes votes {s['yes_votes']}; {s['seconds']} s)"
        )
        print("          wrong: " + ("; ".join(s["wrong"]) or "none"))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
