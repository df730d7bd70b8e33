"""plugin_params of ASPD: {"plugin_type": "aspd", "max_branches": 8, "max_branch_tokens": 256,
"max_title_tokens": 16, "branch_drafts": true, "drafter": {"plugin_type": "memory_decoding", ...}}
(drafter: optional, the drafter of the serial segments, any other plugin_params; branch_drafts:
with a drafter that keeps a trie, greedy branches also draft from it, branch_drafts.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

LIMITS = {"max_branches": (1, 32), "max_branch_tokens": (1, 4096), "max_title_tokens": (1, 64)}


@dataclass(frozen=True)
class AspdParams:
    max_branches: int = 8           # unique titles kept (the rest dropped): branches per block
    max_branch_tokens: int = 256    # a branch's content tokens before the engine closes it
    max_title_tokens: int = 16      # a title's tokens before the grammar closes it
    drafter: Any = None             # PluginConfig of the serial segments' drafter, or None
    branch_drafts: bool = True      # branches draft from the drafter's trie too (when it has one)

    @property
    def decoding_length(self) -> int:
        """The draft tokens per step the serial drafter needs (speculationGamma's rule)."""
        return self.drafter.speculation_need if self.drafter is not None else 0

    @classmethod
    def from_dict(cls, d: dict) -> "AspdParams":
        unknown = sorted(set(d) - set(LIMITS) - {"drafter", "branch_drafts"})
        if unknown:
            raise ConfigError(f"plugin_params.{unknown[0]} is not an aspd parameter; use "
                              f"{', '.join(LIMITS)}, branch_drafts or drafter")
        kw: dict[str, Any] = {}
        if "branch_drafts" in d:
            if not isinstance(d["branch_drafts"], bool):
                raise ConfigError(f"plugin_params.branch_drafts={d['branch_drafts']!r} is invalid; use true or false")
            kw["branch_drafts"] = d["branch_drafts"]
        for key, (lo, hi) in LIMITS.items():
            if key in d:
                v = d[key]
                if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                    raise ConfigError(f"plugin_params.{key}={v!r} is invalid; use an integer from {lo} to {hi}")
                kw[key] = v
        if d.get("drafter") is not None:
            from ..decoding.drafters.plugins import parse_plugin_params
            inner = d["drafter"]
            if isinstance(inner, dict) and inner.get("plugin_type") == "aspd":
                raise ConfigError("plugin_params.drafter cannot be aspd itself; use memory_decoding, la or hybrid")
            kw["drafter"] = parse_plugin_params(inner)
        return cls(**kw)

    def validate(self, speculation_gamma: int | None) -> None:
        if self.drafter is not None:
            self.drafter.params.validate(speculation_gamma)
