"""Plugin types: what a MindIE plugin_params names, validated into a PluginConfig, and how each
type's drafter is built, and what the rest of paraspec asks of a type (the speculationGamma it
needs, whether it adapts its draft length, whether a tokenizer can run it): each fact once, in
its `PluginType`. The drafters of this package are registered below; a decoding mode built on top
of them (ASPD) is registered by the layer that knows both (paraspec/engine_args.py), so that this
layer never imports it.

plugin_params is a JSON string (or dict), as in MindIE's ModelConfig:
    {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": true}
    {"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}     ("lookahead" works too)
    {"plugin_type": "hybrid", ...}                                           (both drafters, one budget)
Each type's own parameters are validated by its params class (`from_dict`, then `validate` with
speculation_gamma).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError


@dataclass(frozen=True)
class PluginConfig:
    plugin_type: str  # a registered type: "memory_decoding" | "lookahead" | "hybrid" | "aspd"
    params: Any  # that type's params: a frozen dataclass (hashable)

    @property
    def kind(self) -> "PluginType":
        return plugin_type(self.plugin_type)

    @property
    def speculation_need(self) -> int:
        """The speculationGamma the algorithm needs (PluginType.need)."""
        return self.kind.need(self.params)

    @property
    def dynamic_algo(self) -> bool:
        """Whether it adapts its draft length (MindIE's dynamic_algo: the server checks maxIterTimes)."""
        return self.kind.dynamic(self.params)

    @property
    def drafting(self) -> "PluginConfig":
        """The config whose drafter proposes the tokens: this one, or the one it wraps, innermost."""
        inner = self.kind.inner(self.params)
        return self if inner is None else inner.drafting

    def check_gamma(self, speculation_gamma: int | None) -> None:
        """Raise where speculation_gamma is too small for these params (each type's own rule)."""
        self.params.validate(speculation_gamma)

    def check_tokenizer(self, tokenizer: Any) -> None:
        """Raise where this model's tokenizer cannot run the type (ASPD: its markup tokens)."""
        self.kind.check_tokenizer(tokenizer)


def _none(params: Any) -> None:
    return None


def _false(params: Any) -> bool:
    return False


def _decoding_length(params: Any) -> int:
    return params.decoding_length


@dataclass(frozen=True)
class PluginType:
    """One plugin_type. params() is its params class and build(params, eos, trie, arms,
    output_memory, inner, model) its drafter (inner: the built drafter of `inner(params)`, else
    None; model: the draft_head.HeadModel a draft head drafts with, None where no model is at hand);
    both import their module on first use, so naming a type loads nothing. need(params): the
    speculationGamma it needs (default: its decoding_length); dynamic(params): whether it adapts
    its draft length; check_tokenizer(tokenizer): raises where a model's tokenizer cannot run it."""

    params: Callable[[], type]
    build: Callable[..., Any]
    memory: Callable[[Any], Any] = (
        _none  # the memory_decoding params inside (a trie to keep), or None
    )
    output_memory: bool = False  # drafts from the engine's output memory
    inner: Callable[[Any], PluginConfig | None] = (
        _none  # a drafter this type wraps (its config), or None
    )
    need: Callable[[Any], int] = _decoding_length
    dynamic: Callable[[Any], bool] = _false
    check_tokenizer: Callable[[Any], None] = _none


PLUGIN_TYPES: dict[str, PluginType] = {}
PLUGIN_ALIASES: dict[str, str] = {}  # every name plugin_type accepts -> the registered type


def register_plugin(name: str, plugin: PluginType, aliases: tuple[str, ...] = ()) -> None:
    PLUGIN_TYPES[name] = plugin
    for alias in (name, *aliases):
        PLUGIN_ALIASES[alias] = name


def plugin_type(name: str) -> PluginType:
    try:
        return PLUGIN_TYPES[name]
    except KeyError:
        raise ValueError(f"no drafter for plugin_type {name!r}") from None


def _choices() -> str:
    """'memory_decoding', 'la' (lookahead), 'hybrid' or 'aspd': each type by its shortest name."""
    names = []
    for name in PLUGIN_TYPES:
        short = min((a for a, t in PLUGIN_ALIASES.items() if t == name), key=len)
        names.append(f"'{short}'" + (f" ({name})" if short != name else ""))
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]


def parse_plugin_params(
    value: str | dict | None, speculation_gamma: int | None = None
) -> PluginConfig | None:
    """MindIE plugin_params (JSON string or dict) -> PluginConfig, validated. None/"" -> None."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"plugin_params is not valid JSON ({e.msg} at char {e.pos}); pass e.g. "
                '\'{"plugin_type":"memory_decoding","decoding_length":16}\''
            ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            'plugin_params must be a JSON object such as {"plugin_type": "memory_decoding"}'
        )
    raw_type = value.get("plugin_type")
    if not isinstance(raw_type, str):
        raise ConfigError(
            "plugin_params.plugin_type is missing; use 'memory_decoding', 'la' (lookahead) or 'hybrid'"
        )
    kinds = [k.strip() for k in raw_type.split(",") if k.strip()]
    if len(kinds) > 1:
        raise ConfigError(
            f"plugin_params.plugin_type={raw_type!r} enables several algorithms at once; pick one, "
            "or use 'hybrid' to merge memory_decoding and lookahead drafts"
        )
    kind = PLUGIN_ALIASES.get(raw_type.strip())
    if kind is None:
        raise ConfigError(f"plugin_params.plugin_type={raw_type!r} is unknown; use {_choices()}")
    rest = {k: v for k, v in value.items() if k != "plugin_type"}
    params = PLUGIN_TYPES[kind].params().from_dict(rest)
    params.validate(speculation_gamma)
    return PluginConfig(kind, params)


# ------------------------------------------------------------------------ this package's drafters


def _memory_params():
    from .memory_decoding import MemoryDecodingParams

    return MemoryDecodingParams


def _memory_drafter(p, eos, trie, arms, output_memory, inner, model=None):
    from .memory_decoding import MemoryDrafter

    return MemoryDrafter(p, eos_token_ids=eos, trie=trie)


def _lookahead_params():
    from .lookahead import LookaheadParams

    return LookaheadParams


def _lookahead_drafter(p, eos, trie, arms, output_memory, inner, model=None):
    from .lookahead import LookaheadDrafter

    return LookaheadDrafter(p, eos_token_ids=eos, arms=arms)


def _hybrid_params():
    from .hybrid import HybridParams

    return HybridParams


def _hybrid_drafter(p, eos, trie, arms, output_memory, inner, model=None):
    from .hybrid import HybridDrafter

    return HybridDrafter(
        p, eos_token_ids=eos, trie=trie, arms=arms, output_memory=output_memory, model=model
    )


register_plugin(
    "memory_decoding",
    PluginType(
        _memory_params, _memory_drafter, memory=lambda p: p, dynamic=lambda p: p.dynamic_algo
    ),
)
register_plugin(
    "lookahead",
    PluginType(_lookahead_params, _lookahead_drafter, need=lambda p: p.query_tokens),
    aliases=("la",),
)
register_plugin(
    "hybrid",
    PluginType(_hybrid_params, _hybrid_drafter, memory=lambda p: p.memory, output_memory=True),
)
