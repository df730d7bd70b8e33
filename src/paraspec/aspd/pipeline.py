"""The extraction pipeline: the paper's stages over (id, question, answer) triples, with counts.

Stages and checks are extract.py's (split, format_ok, integrity_problem, consistency_problem);
the independence and consistency votes are a judge's (judge.py). Its own module, so that the
judge can read extract's checks without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .data import Block, Example, Segment, parallel_metrics, plain_text
from .extract import STAGES, consistency_problem, format_ok, integrity_problem, split
from .judge import Judge, accept


@dataclass
class Pipeline:
    judge: Judge
    # tokens (a tokenizer's length, or chars / 4)
    count: Callable[[str], int] = lambda s: len(s) // 4
    min_tokens: int = 128
    votes: int = 3
    unanimous: bool = True
    splitter: Callable[[str], list[list[Segment]]] = split
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    by_source: dict[str, dict[str, int]] = field(default_factory=dict)

    def _keep(self, stage: str, cands: list, source: str) -> list:
        self.counts[stage] += len(cands)
        self.by_source[source][stage] += len(cands)
        return cands

    def _independent(self, question: str, segments: list[Segment]) -> list[Segment]:
        out: list[Segment] = []
        for i, s in enumerate(segments):
            if isinstance(s, Block):
                pre = plain_text(segments[:i])
                if not accept(self.judge.independent(question, pre, s, self.votes), self.unanimous):
                    s = plain_text([s])  # the paper flattens a rejected group to serial text
            if out and isinstance(s, str) and isinstance(out[-1], str):
                out[-1] += s
            else:
                out.append(s)
        return out

    def _consistent(self, question: str, answer: str, cand: list[Segment]) -> bool:
        if integrity_problem(answer, cand) or consistency_problem(answer, cand):
            return False
        return accept(self.judge.consistent(question, answer, cand, self.votes), self.unanimous)

    def run(
        self, items: list[tuple[str, str, str]], source: str = "extract", keep_serial: bool = False
    ) -> list[Example]:
        """items: (id, question, plain answer). Returns the accepted examples (source `source`);
        with keep_serial, an answer none of whose candidates is accepted is kept as serial text
        (family "serial", counted as by_source[source]["serial"])."""
        counts = self.by_source.setdefault(source, dict.fromkeys(STAGES, 0))
        if keep_serial:
            counts.setdefault("serial", 0)
        accepted = []
        for idx, question, answer in items:
            self.counts["input"] += 1
            counts["input"] += 1
            cands = self._keep("parsed", self.splitter(answer), source)
            cands = self._keep(
                "min_length", cands if self.count(answer) >= self.min_tokens else [], source
            )
            cands = self._keep("format", [c for c in cands if format_ok(c)], source)
            cands = self._keep(
                "integrity", [c for c in cands if integrity_problem(answer, c) is None], source
            )
            cands = [self._independent(question, c) for c in cands]
            cands = self._keep(
                "independence", [c for c in cands if any(isinstance(s, Block) for s in c)], source
            )
            cands = self._keep(
                "consistency", [c for c in cands if self._consistent(question, answer, c)], source
            )
            if cands:
                best = max(cands, key=lambda c: tuple(parallel_metrics(c, self.count).values()))
                self._keep("selected", [best], source)
                accepted.append(Example(idx, "extracted", question, best, source=source))
            elif keep_serial:
                counts["serial"] += 1
                accepted.append(Example(idx, "serial", question, [answer], source=source))
        return accepted
