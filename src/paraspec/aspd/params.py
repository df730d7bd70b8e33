"""plugin_params of ASPD: {"plugin_type": "aspd", "max_branches": 8, "max_branch_tokens": 256,
"max_title_tokens": 16, "branch_drafts": true, "open_threshold": 0.0,
"drafter": {"plugin_type": "memory_decoding", ...}}
(drafter: optional, the drafter of the serial segments, any other plugin_params; branch_drafts:
with a drafter that keeps a trie, greedy branches also draft from it, branch_drafts.py;
open_threshold: the probability the model must give a block's opening for it to open, grammar.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

LIMITS = {"max_branches": (1, 32), "max_branch_tokens": (1, 4096), "max_title_tokens": (1, 64)}


@dataclass(frozen=True)
class AspdParams:
    max_branches: int = 8  # unique titles kept (the rest dropped): branches per block
    max_branch_tokens: int = 256  # a branch's content tokens before the engine closes it
    max_title_tokens: int = 16  # a title's tokens before the grammar closes it
    drafter: Any = None  # PluginConfig of the serial segments' drafter, or None
    branch_drafts: bool = True  # branches draft from the drafter's trie too (when it has one)
    open_threshold: float = 0.0  # P(<|title|>) a block needs to open (grammar.py); 0: no threshold

    @property
    def decoding_length(self) -> int:
        """The draft tokens per step the serial drafter needs (speculationGamma's rule)."""
        return self.drafter.speculation_need if self.drafter is not None else 0

    @classmethod
    def from_dict(cls, d: dict) -> "AspdParams":
        unknown = sorted(set(d) - set(LIMITS) - {"drafter", "branch_drafts", "open_threshold"})
        if unknown:
            raise ConfigError(
                f"plugin_params.{unknown[0]} is not an aspd parameter; use "
                f"{', '.join(LIMITS)}, branch_drafts, open_threshold or drafter"
            )
        kw: dict[str, Any] = {}
        if "open_threshold" in d:
            v = d["open_threshold"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ConfigError(
                    f"plugin_params.open_threshold={v!r} is invalid; use a number from 0 "
                    "(the model's own draw) up to, not including, 1"
                )
            kw["open_threshold"] = float(v)
        if "branch_drafts" in d:
            if not isinstance(d["branch_drafts"], bool):
                raise ConfigError(
                    f"plugin_params.branch_drafts={d['branch_drafts']!r} is invalid; use true or false"
                )
            kw["branch_drafts"] = d["branch_drafts"]
        for key, (lo, hi) in LIMITS.items():
            if key in d:
                v = d[key]
                if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                    raise ConfigError(
                        f"plugin_params.{key}={v!r} is invalid; use an integer from {lo} to {hi}"
                    )
                kw[key] = v
        if d.get("drafter") is not None:
            from ..decoding.drafters.plugins import parse_plugin_params

            inner = d["drafter"]
            if isinstance(inner, dict) and inner.get("plugin_type") == "aspd":
                raise ConfigError(
                    "plugin_params.drafter cannot be aspd itself; use memory_decoding, la or hybrid"
                )
            kw["drafter"] = parse_plugin_params(inner)
        return cls(**kw)

    def validate(self, speculation_gamma: int | None) -> None:
        if self.drafter is not None:
            self.drafter.params.validate(speculation_gamma)
