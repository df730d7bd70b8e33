"""ASPD training records: an answer as serial text and parallel blocks, rendered two ways.

An answer is a list of segments: serial strings and `Block`s of titled branches. `aspd_text`
renders the contract's markup (titles list, `<|para|>`, each branch restating "T: ", `<|/para|>`);
`plain_text` is what a user reads (markup.to_plain's rule: the titles and markup dropped, branch
contents joined by "\n"). The control model trains on `labelled_text` of the very same answer
(plain text with each branch line led by its "title: ", the words ASPD's branches restate), so
the two runs differ only in the markup, the mask and the positions.

Records are JSONL, one `Example` per line (`write_jsonl` / `read_jsonl`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Union

from .markup import BRANCH, END_BRANCH, END_PARA, END_TITLE, PARA, TITLE, TITLE_SEP


@dataclass(frozen=True)
class Branch:
    title: str
    content: str


@dataclass(frozen=True)
class Block:
    branches: tuple[Branch, ...]


Segment = Union[str, Block]


def aspd_text(segments: Iterable[Segment]) -> str:
    out = []
    for seg in segments:
        if isinstance(seg, str):
            out.append(seg)
            continue
        out.extend(f"{TITLE}{b.title}{END_TITLE}" for b in seg.branches)
        out.append(PARA)
        out.extend(f"{BRANCH}{b.title}{TITLE_SEP}{b.content}{END_BRANCH}" for b in seg.branches)
        out.append(END_PARA)
    return "".join(out)


def plain_text(segments: Iterable[Segment]) -> str:
    return "".join(
        s if isinstance(s, str) else "\n".join(b.content for b in s.branches) for s in segments
    )


def labelled_text(segments: Iterable[Segment]) -> str:
    """plain_text with each branch line led by its "title: ", as ASPD's branches restate it: the
    control trains on this, so that ASPD and the control see the same words (the part labels a
    branch is forced to start with help a small model keep its parts apart) and differ only in the
    markup, the mask and the positions."""
    return "".join(
        s
        if isinstance(s, str)
        else "\n".join(f"{b.title}{TITLE_SEP}{b.content}" for b in s.branches)
        for s in segments
    )


@dataclass
class Example:
    """One training / evaluation item. `checks` is what the exact checker needs (synthetic items);
    extracted items have none and are scored by the judge instead."""

    id: str
    family: str
    prompt: str
    segments: list[Segment]
    checks: list[dict] = field(default_factory=list)
    source: str = "synth"
    # earlier turns ({"role", "content"}) before `prompt`
    history: list[dict] = field(default_factory=list)

    @property
    def messages(self) -> list[dict]:
        """The chat a model is prompted with: the history, then `prompt` as the user's turn."""
        return [*self.history, {"role": "user", "content": self.prompt}]

    @property
    def aspd(self) -> str:
        return aspd_text(self.segments)

    @property
    def plain(self) -> str:
        return plain_text(self.segments)

    @property
    def labelled(self) -> str:
        return labelled_text(self.segments)

    @property
    def blocks(self) -> list[Block]:
        return [s for s in self.segments if isinstance(s, Block)]

    def to_json(self) -> dict:
        segs = [
            s if isinstance(s, str) else {"branches": [asdict(b) for b in s.branches]}
            for s in self.segments
        ]
        out = {
            "id": self.id,
            "family": self.family,
            "source": self.source,
            "prompt": self.prompt,
            "aspd": self.aspd,
            "plain": self.plain,
            "segments": segs,
            "checks": self.checks,
        }
        # only when there is one: records without it (and their digests) stay as they were
        if self.history:
            out["history"] = self.history
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Example":
        segs: list[Segment] = [
            s if isinstance(s, str) else Block(tuple(Branch(**b) for b in s["branches"]))
            for s in d["segments"]
        ]
        return cls(
            d["id"],
            d["family"],
            d["prompt"],
            segs,
            d.get("checks", []),
            d.get("source", "synth"),
            list(d.get("history", [])),
        )


def write_jsonl(path: str | Path, examples: Iterable[Example]) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for ex in examples:
            f.write(json.dumps(ex.to_json(), ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[Example]:
    path = Path(path)
    if not path.is_file():
        from ..errors import ConfigError

        raise ConfigError(
            f"data file {str(path)!r} does not exist; run `paraspec aspd build-data` first"
        )
    return [
        Example.from_json(json.loads(line))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line
    ]


def parallel_metrics(segments: list[Segment], count=len) -> dict:
    """The paper's selection metrics for one answer (metrics.py there, in tokens when `count`
    is a tokenizer's length, else characters): DP = branch-content share of the text,
    ABN = branches per block, APE = (branch - title) / branch."""
    blocks = [s for s in segments if isinstance(s, Block)]
    total = max(1, count(plain_text(segments)))
    branch = sum(count(b.title + TITLE_SEP + b.content) for blk in blocks for b in blk.branches)
    titles = sum(count(b.title + TITLE_SEP) for blk in blocks for b in blk.branches)
    content = sum(count(b.content) for blk in blocks for b in blk.branches)
    return {
        "dp": content / total,
        "abn": (sum(len(b.branches) for b in blocks) / len(blocks)) if blocks else 0.0,
        "ape": (branch - titles) / branch if branch else 0.0,
    }
