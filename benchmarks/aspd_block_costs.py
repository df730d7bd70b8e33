"""Where ASPD's forward passes go on the prompts where a block opened, from an `aspd eval` report.

    python benchmarks/aspd_block_costs.py REPORT.json [--model PATH]

Wall-clock ratios on a shared 2-core VM move by +-10 % from run to run; forward passes do not
(greedy, the same answers every run). Per real set of the report, on the prompts where ASPD
opened a block: forward passes per answer token of every decoder (the control writes one token a
pass), and ASPD's block accounting in tokens of --model's tokenizer (the ASPD model the report
ran): the titles lists (each title with its two markers, and `<|para|>`) and the titles in them
that repeat an earlier one, the branches per block, and the passes the branches save (the sum of
their content tokens less the longest: what one row per branch in one pass buys; the forced
"T:" prefixes all go in the block's first pass).
"""

from __future__ import annotations

import argparse
import json
import re

import torch

from paraspec.aspd.markup import END_TITLE, PARA, TITLE, parse
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer

_LIST = re.compile(f"((?:{re.escape(TITLE)}.*?{re.escape(END_TITLE)})+)({re.escape(PARA)}|$)", re.S)
_TITLE = re.compile(f"{re.escape(TITLE)}(.*?){re.escape(END_TITLE)}", re.S)


def block_costs(rows: list[dict], count) -> dict:
    """Token accounting of ASPD's raw answers (rows with blocks), `count`: text -> tokens."""
    out = dict(blocks=0, branches=0, list_tokens=0, titles=0, repeats=0, repeat_tokens=0)
    out.update(branch_content_tokens=0, longest_branch_tokens=0)
    for r in rows:
        for titles_list, _ in _LIST.findall(r["raw"]):
            seen: set[str] = set()
            out["list_tokens"] += 1  # <|para|>
            for title in _TITLE.findall(titles_list):
                n = count(title) + 2
                out["list_tokens"] += n
                out["titles"] += 1
                if title in seen:
                    out["repeats"] += 1
                    out["repeat_tokens"] += n
                seen.add(title)
        for block in (seg for seg in parse(r["raw"]) if seg.branches):
            lengths = [count(b.content) for b in block.branches]
            out["blocks"] += 1
            out["branches"] += len(lengths)
            out["branch_content_tokens"] += sum(lengths)
            out["longest_branch_tokens"] += max(lengths, default=0)
    out["passes_saved_by_branches"] = out["branch_content_tokens"] - out["longest_branch_tokens"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument(
        "--model",
        default="~/.cache/paraspec/aspd/aspd",
        help="the ASPD model the report ran (its tokenizer counts the tokens)",
    )
    args = ap.parse_args()
    from pathlib import Path

    tok = Tokenizer.from_source(
        load_model(str(Path(args.model).expanduser()), torch.float32).tokenizer_source
    )
    report = json.loads(Path(args.report).read_text())
    for name in ("real", "sharegpt", "mtbench"):
        if not report.get(name):
            continue
        answers = report[name]["answers"]
        idx = [i for i, r in enumerate(answers["aspd"]) if r["blocks"]]
        per_token = {
            mode: round(
                sum(rs[i]["forward_passes"] for i in idx)
                / max(1, sum(rs[i]["answer_tokens"] for i in idx)),
                3,
            )
            for mode, rs in answers.items()
        }
        costs = block_costs(
            [answers["aspd"][i] for i in idx], lambda s: len(tok.encode(s, add_bos=False))
        )
        print(
            json.dumps(
                {
                    "set": name,
                    "prompts_with_blocks": len(idx),
                    "forward_passes_per_answer_token": per_token,
                    **costs,
                }
            )
        )


if __name__ == "__main__":
    main()
