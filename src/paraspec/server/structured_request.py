"""A request's structured-output fields -> StructuredOutputsParams, checked before anything reaches the
engine: `response_format` (OpenAI: text, json_object, json_schema) and paraspec's own
`paraspec.grammar` ({"regex": ...}, {"lark": ...}, {"gbnf": ...} or {"choice": [...]}). A schema or
grammar the library cannot compile, or one that admits no output, is a 400 naming the field."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ..errors import ParaspecError
from ..model.tokenizer import Tokenizer
from ..sampling.params import SamplingParams
from ..structured.grammar import compiler_for
from ..structured.params import StructuredOutputsParams
from .api_errors import APIError

GRAMMAR_KINDS = {"regex": "regex", "lark": "grammar", "gbnf": "grammar", "choice": "choice"}


def from_response_format(fmt: dict[str, Any] | None) -> StructuredOutputsParams | None:
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return _params("response_format", json_object=True)
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise APIError(
                'response_format.json_schema must be {"name": ..., "schema": {...}, "strict": ...}',
                param="response_format.json_schema",
            )
        if not isinstance(spec.get("name", ""), str):
            raise APIError(
                "response_format.json_schema.name must be a string",
                param="response_format.json_schema.name",
            )
        strict = spec.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise APIError(
                "response_format.json_schema.strict must be true or false",
                param="response_format.json_schema.strict",
            )
        # not strict: keywords the library does not implement are ignored rather than refused
        return _params(
            "response_format.json_schema.schema",
            json=spec.get("schema", {}),
            lenient=strict is False,
        )
    raise APIError(
        f"response_format.type={kind!r} is invalid: use 'text', 'json_object' or 'json_schema'",
        param="response_format.type",
    )


def from_grammar(grammar: dict[str, Any] | None) -> StructuredOutputsParams | None:
    if grammar is None:
        return None
    if (
        not isinstance(grammar, dict)
        or len(grammar) != 1
        or next(iter(grammar)) not in GRAMMAR_KINDS
    ):
        raise APIError(
            'paraspec.grammar must be one of {"regex": ...}, {"lark": ...}, {"gbnf": ...}, '
            '{"choice": [...]}',
            param="paraspec.grammar",
        )
    ((key, value),) = grammar.items()
    return _params(f"paraspec.grammar.{key}", **{GRAMMAR_KINDS[key]: value})


def _params(param: str, **kw) -> StructuredOutputsParams:
    try:
        return StructuredOutputsParams(**kw)
    except ParaspecError as e:
        raise APIError(str(e).replace("structured_outputs", param, 1), param=param) from None


async def check_compiles(
    spec: StructuredOutputsParams, tokenizer: Tokenizer, vocab_size: int, param: str
) -> None:
    """Compile now (off the event loop: the first one builds the tokenizer's index, ~0.5 s): the engine
    then copies the compiled grammar."""

    def compile_() -> None:
        compiler_for(tokenizer, vocab_size).matcher(spec)

    try:
        await asyncio.to_thread(compile_)
    except ParaspecError as e:
        raise APIError(str(e), param=param) from None


def asked(
    req, extra: tuple[StructuredOutputsParams | None, str] | None = None
) -> tuple[StructuredOutputsParams | None, str]:
    """What constrains a request's output and the field that asked (response_format, paraspec.grammar,
    or `extra`: the tool call format), one of them at most."""
    grammar = req.paraspec.grammar if req.paraspec else None
    given = [
        (spec, param)
        for spec, param in (
            (from_response_format(req.response_format), _format_param(req.response_format)),
            (from_grammar(grammar), f"paraspec.grammar.{next(iter(grammar))}" if grammar else ""),
            extra or (None, ""),
        )
        if spec is not None
    ]
    if len(given) > 1:
        names = [param.split(".json_schema")[0] for _, param in given]
        raise APIError(
            f"{names[0]} and {names[1]} both constrain the output; send one of them",
            param=given[1][1],
        )
    return given[0] if given else (None, "")


def _format_param(fmt: dict | None) -> str:
    return (
        "response_format.json_schema.schema"
        if fmt and fmt.get("type") == "json_schema"
        else "response_format"
    )


async def constrain(
    params: SamplingParams,
    spec: StructuredOutputsParams,
    param: str,
    tokenizer: Tokenizer,
    vocab_size: int,
) -> SamplingParams:
    """params with the checked constraint (400s name `param`)."""
    await check_compiles(spec, tokenizer, vocab_size, param)
    try:
        return dataclasses.replace(params, structured_outputs=spec)
    except ParaspecError as e:
        raise APIError(str(e), param=e.param) from None
