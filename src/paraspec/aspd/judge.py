"""Judges for the extraction pipeline: is a block's set of branches independent, and does the
rewritten answer say what the original said? Each call returns n votes; `accept` applies the
paper's rule (released defaults: unanimous, n = 3; majority is the paper text's variant).

- RuleJudge: deterministic (its n votes agree). Independence fails on a cross reference
  ("above", "previous", "step 3", "as mentioned", "because of this" ...), on a later branch that
  opens with a sequence word ("Then", "After that", "Next", "Finally", "Once", "So", "Therefore",
  "That ...") after its list marker and title lead, or on a branch reusing a number that only a
  sibling introduced (a result computed there). It cannot see an order that no word states (a
  recipe's numbered steps): benchmarks/aspd_judge.py measures what it misses. Consistency is
  extract.integrity_problem and extract.consistency_problem (exact text, each block one whole
  list of the original, titles restated by their branches).
- LLMJudge: the local model (paraspec's LLM API, the bundled model by default) answers a yes/no
  prompt n times with sampling; a vote is "yes" when the reply starts with yes. For consistency
  it reads the original and the candidate with each block shown as "[title] content" lines
  (the plain texts are equal by integrity; what it can judge is whether the titles fit).
"""

from __future__ import annotations

import re
from typing import Protocol

from .data import Block, Segment

CROSS_REF = re.compile(
    r"\b(above|below|previous(ly)?|preceding|aforementioned|earlier|the following|as mentioned|as noted|"
    r"same as|(step|item|point|part|section) \d+|former|latter|this result|that result)\b",
    re.I,
)
CROSS_REF_EXTRA = re.compile(
    r"\b(as a result|because of (this|that)|for this reason|due to (this|that))\b", re.I
)
# a branch after the first opening with one of these continues its sibling rather than standing alone
SEQUENCE_OPENER = re.compile(
    r"^(then|next|after that|afterwards?|finally|lastly|once|so|therefore|thus|hence|subsequently|that|those)\b",
    re.I,
)
LEAD = re.compile(r"^\s*(?:[-*+]|\d{1,2}[.)]|[A-Za-z][.)])?\s*(?:\*\*[^*\n]{1,40}\*\*\s*:?\s*)?")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?!\w|\.\d)")


class Judge(Protocol):
    name: str

    def independent(self, question: str, precondition: str, block: Block, n: int) -> list[bool]: ...

    def consistent(
        self, question: str, original: str, candidate: list[Segment], n: int
    ) -> list[bool]: ...


def accept(votes: list[bool], unanimous: bool = True) -> bool:
    if not votes:
        return False
    return all(votes) if unanimous else sum(votes) * 2 > len(votes)


class RuleJudge:
    name = "rule"

    def independent(self, question: str, precondition: str, block: Block, n: int) -> list[bool]:
        return [self._independent(question, precondition, block)] * n

    @staticmethod
    def _opening(branch) -> str:
        """The branch's own words: without its list marker, bold lead or "Title:" lead."""
        text = LEAD.sub("", branch.content, count=1)
        if text[: len(branch.title) + 1].casefold() == branch.title.casefold() + ":":
            text = text[len(branch.title) + 1 :]
        return text.lstrip(" ,:")

    @classmethod
    def _independent(cls, question: str, precondition: str, block: Block) -> bool:
        if any(
            CROSS_REF.search(b.content) or CROSS_REF_EXTRA.search(b.content) for b in block.branches
        ):
            return False
        if any(SEQUENCE_OPENER.match(cls._opening(b)) for b in block.branches[1:]):
            return False
        known = set(NUMBER.findall(question)) | set(NUMBER.findall(precondition))
        numbers = [set(NUMBER.findall(b.content)) - known for b in block.branches]
        for i, mine in enumerate(numbers):
            for j, other in enumerate(numbers):
                # a multi-digit number first seen in an earlier sibling: reuse of its result
                if j < i and any(len(x) > 1 for x in mine & other):
                    return False
        return True

    def consistent(
        self, question: str, original: str, candidate: list[Segment], n: int
    ) -> list[bool]:
        from .extract import consistency_problem, integrity_problem  # extract imports this module

        ok = (
            integrity_problem(original, candidate) is None
            and consistency_problem(original, candidate) is None
        )
        return [ok] * n


INDEP_PROMPT = (
    "Question: {question}\n\nAn answer to it has these parts:\n{parts}\n\n"
    "Can each part be written without reading any of the other parts (no part uses another part's "
    "result or refers to it)? Reply with yes or no."
)
CONSIST_PROMPT = (
    "Question: {question}\n\nAnswer 1:\n{original}\n\nAnswer 2:\n{candidate}\n\n"
    "Answer 2 is Answer 1 with a [title] before some parts. Does each title fit its part, and do the two "
    "answers give the same information? Reply with yes or no."
)


class LLMJudge:
    """The local model as a judge. `llm` is a paraspec.api.LLM (default: the bundled model)."""

    name = "llm"

    def __init__(self, llm=None, temperature: float = 0.7, seed: int = 0):
        if llm is None:
            from ..api import LLM

            llm = LLM("default")
        self.llm = llm
        self.temperature = temperature
        self.seed = seed

    def _votes(self, prompt: str, n: int) -> list[bool]:
        from ..sampling.params import SamplingParams

        params = SamplingParams(temperature=self.temperature, max_tokens=3, n=n, seed=self.seed)
        out = self.llm.chat([{"role": "user", "content": prompt}], params)[0]
        return [o.text.strip().lower().startswith("yes") for o in out.outputs]

    def independent(self, question: str, precondition: str, block: Block, n: int) -> list[bool]:
        parts = "\n".join(f"[{b.title}] {b.content}" for b in block.branches)
        return self._votes(INDEP_PROMPT.format(question=question, parts=parts), n)

    def consistent(
        self, question: str, original: str, candidate: list[Segment], n: int
    ) -> list[bool]:
        shown = "".join(
            s if isinstance(s, str) else "\n".join(f"[{b.title}] {b.content}" for b in s.branches)
            for s in candidate
        )
        return self._votes(
            CONSIST_PROMPT.format(question=question, original=original, candidate=shown), n
        )


class BothJudges:
    """Rule judge first (cheap, exact); the model votes only on what the rules accept."""

    name = "rule+llm"

    def __init__(self, llm_judge: LLMJudge):
        self.rule, self.llm = RuleJudge(), llm_judge

    def independent(self, question: str, precondition: str, block: Block, n: int) -> list[bool]:
        votes = self.rule.independent(question, precondition, block, n)
        return votes if not all(votes) else self.llm.independent(question, precondition, block, n)

    def consistent(
        self, question: str, original: str, candidate: list[Segment], n: int
    ) -> list[bool]:
        votes = self.rule.consistent(question, original, candidate, n)
        return votes if not all(votes) else self.llm.consistent(question, original, candidate, n)
