"""Typed reads of a JSON object (config.json's sections), for a validator that reports every
problem at once: a value of the wrong type or out of range becomes one problem naming its full key
path, the allowed type or range and the default used instead; unknown keys become notes with a
"did you mean"."""

from __future__ import annotations

import difflib
from typing import Any

_JSON_NAMES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


class Section:
    """Typed reads of one JSON object; each bad value becomes one problem naming the full key path."""

    def __init__(self, path: str, raw: Any, problems: list[str], notes: list[str]):
        self.path, self.problems, self.notes = path, problems, notes
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            problems.append(f"{path or 'the file'} must be a JSON object, not {_json_name(raw)}")
            raw = {}
        self.raw: dict = raw
        self.used: set[str] = set()

    def key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def section(self, key: str) -> "Section":
        self.used.add(key)
        return Section(self.key(key), self.raw.get(key), self.problems, self.notes)

    def get(
        self,
        key: str,
        kind,
        default,
        lo: float | None = None,
        hi: float | None = None,
        int_as_bool: bool = False,
    ):
        self.used.add(key)
        if key not in self.raw:
            return default
        value = self.raw[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # MindIE files write "truncation": 0
        if int_as_bool and type(value) is int and value in (0, 1):
            value = bool(value)
        ok = any(_is(value, k) for k in kinds)
        if not ok:
            want = " or ".join(_JSON_NAMES[k] for k in kinds)
            self.problems.append(
                f"{self.key(key)}={value!r} is {_json_name(value)}; use a JSON {want}"
                + (f" (default {default!r})" if default is not None else "")
            )
            return default
        if lo is not None and not lo <= value <= hi:
            whole = kind is int
            rng = f"an integer from {lo} to {hi}" if whole else f"a number from {lo} to {hi}"
            self.problems.append(f"{self.key(key)}={value!r} is out of range; use {rng}")
            return default
        return float(value) if kind is float else value

    def check_unknown(self, mindie_keys: set[str]) -> None:
        for key in self.raw:
            if key in self.used or key in mindie_keys:
                continue
            close = difflib.get_close_matches(key, sorted(self.used | mindie_keys), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.notes.append(f"unknown key {self.key(key)!r} is ignored{hint}")


def _is(value: Any, kind: type) -> bool:
    if kind is bool:
        return type(value) is bool
    if kind is int:  # true/false is not a count
        return type(value) is int
    if kind is float:
        return type(value) in (int, float)
    return isinstance(value, kind)


def _json_name(value: Any) -> str:
    if value is None:
        return "null"
    return "a JSON " + _JSON_NAMES.get(type(value), type(value).__name__)
