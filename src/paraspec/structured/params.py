"""StructuredOutputsParams: what a request constrains its output to (vLLM's names), plain data.

Exactly one of json, json_object, regex, choice and grammar. Compiling it needs the tokenizer and
the grammar library (grammar.py); this module checks only the shape, so SamplingParams stays
cheap to build and to send to another process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SamplingParamsError

KINDS = ("json", "json_object", "regex", "choice", "grammar")


@dataclass
class StructuredOutputsParams:
    json: dict | str | None = None  # a JSON schema (object or its JSON text)
    json_object: bool = False  # any JSON object
    regex: str | None = None  # the whole output matches this regex (Rust regex syntax)
    choice: list[str] | None = None  # the output is one of these strings
    grammar: str | None = None  # Lark (llguidance's dialect) or GBNF (has '::=')
    lenient: bool = False  # JSON schema: ignore keywords the library does not implement
    forced_drafts: bool = True  # paraspec: draft the tokens the grammar alone allows

    def __post_init__(self) -> None:
        self.validate()

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    def validate(self, param: str = "structured_outputs") -> None:
        def bad(rule: str) -> SamplingParamsError:
            return SamplingParamsError(f"{param}: {rule}", param=param)

        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise bad(f"give exactly one of {', '.join(KINDS)} (got {', '.join(given) or 'none'})")
        if self.json is not None and not isinstance(self.json, (dict, str)):
            raise bad("json must be a JSON schema object (or its JSON text)")
        for name in ("regex", "grammar"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise bad(f"{name} must be a non-empty string")
        if self.choice is not None and (
            not isinstance(self.choice, list)
            or not self.choice
            or not all(isinstance(c, str) and c for c in self.choice)
        ):
            raise bad("choice must be a non-empty list of non-empty strings")
        for name in ("json_object", "lenient", "forced_drafts"):
            if not isinstance(getattr(self, name), bool):
                raise bad(f"{name} must be true or false")


def describe(spec: StructuredOutputsParams) -> dict[str, Any]:
    """The spec as a cache key's parts (what changes the compiled grammar)."""
    return {"kind": spec.kind, "value": getattr(spec, spec.kind), "lenient": spec.lenient}
