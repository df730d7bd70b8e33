"""Constrained decoding on tiny random models: every output obeys its grammar, parallel decoding under
a grammar gives exactly the tokens plain decoding under it gives (greedy and seeded sampling), and
the tokens a grammar forces are drafted: fewer steps for the same tokens."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from drafters import OracleDrafter, RandomTreeDrafter
from paraspec import LLM, SamplingParams
from paraspec.decoding.contract.tree import DraftTree
from paraspec.errors import ParaspecError, RequestError
from paraspec.structured.forced import constrain_draft
from paraspec.structured.grammar import compiler_for
from paraspec.structured.params import StructuredOutputsParams

pytest.importorskip("llguidance")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age", "admin", "tags"],
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "admin": {"type": "boolean"},
        "tags": {"type": "array", "maxItems": 2, "items": {"enum": ["red", "green", "blue"]}},
    },
}
PROMPTS = ["hello world", "Extract the user: Ann, 31, admin.", "{", "x = [1, 2, 3]\ny ="]
JSONISH = '{}[]":, abcdefnrtu0123456789'  # a random drafter's tokens: some allowed, most not


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(str(tiny_model_dir("llama", n_layers=2, hidden=64)), dtype="float32")


def _run(llm, params, drafter=None, prompts=PROMPTS):
    llm.engine.default_drafter = drafter
    try:
        return llm.generate(prompts, params)
    finally:
        llm.engine.default_drafter = None


def _valid(doc: dict) -> bool:
    return (
        set(doc) == {"name", "age", "admin", "tags"}
        and isinstance(doc["name"], str)
        and len(doc["name"]) <= 6
        and type(doc["age"]) is int
        and 0 <= doc["age"] <= 120
        and type(doc["admin"]) is bool
        and len(doc["tags"]) <= 2
        and set(doc["tags"]) <= {"red", "green", "blue"}
    )


def _params(temperature=0.0, seed=None, forced=True, **spec):
    spec = spec or {"json": SCHEMA}
    return SamplingParams(
        temperature=temperature,
        seed=seed,
        max_tokens=160,
        structured_outputs=StructuredOutputsParams(**spec, forced_drafts=forced),
    )


def test_outputs_obey_the_schema_greedy_and_sampled(llm):
    for params in (_params(), _params(temperature=1.0, seed=3)):
        for out in _run(llm, params):
            assert out.finish_reason == "stop", out.text
            assert _valid(json.loads(out.text)), out.text


def test_unconstrained_output_of_the_same_model_is_not_json(llm):
    # the test above can fail: without the grammar this random model writes no such document
    for out in _run(llm, SamplingParams(temperature=0, max_tokens=60)):
        with pytest.raises(ValueError):
            _valid(json.loads(out.text))


@pytest.mark.parametrize("drafter", ["random", "oracle"])
def test_parallel_equals_plain_decoding_under_the_grammar(llm, drafter):
    vocab = llm.model.args.vocab_size
    for params in (_params(), _params(temperature=0.8, seed=11)):
        plain = _run(llm, params, None)
        for prompt, ref in zip(PROMPTS, plain):
            d = (
                RandomTreeDrafter(vocab, nodes=12, seed=5, tokens=llm.tokenizer.encode(JSONISH))
                if drafter == "random"
                else OracleDrafter(ref.prompt_token_ids + ref.token_ids, vocab, depth=8)
            )
            par = _run(llm, params, d, [prompt])[0]
            assert par.token_ids == ref.token_ids
            if drafter == "oracle":
                assert par.stats["accepted_draft_tokens"] > 0


def test_forced_tokens_are_drafted_free(llm):
    on, off = _run(llm, _params(forced=True)), _run(llm, _params(forced=False))
    for a, b in zip(on, off):
        assert a.token_ids == b.token_ids
        assert a.stats["forced_draft_tokens"] > 0
        # forced: always accepted
        assert a.stats["accepted_forced_tokens"] == a.stats["forced_draft_tokens"]
        assert b.stats["decode_steps"] == len(b.token_ids) - 1  # one token a step without them
        # keys, quotes, colons forced
        assert a.stats["decode_steps"] < b.stats["decode_steps"] * 0.7


def test_regex_choice_and_grammar(llm):
    out = _run(llm, _params(regex=r"[a-c]{2,5}-\d{3}"))
    assert all(re.fullmatch(r"[a-c]{2,5}-\d{3}", o.text) for o in out)
    out = _run(llm, _params(choice=["yes", "no", "maybe not"]))
    assert all(o.text in ("yes", "no", "maybe not") for o in out)
    out = _run(llm, _params(grammar='start: "(" NUM ("+" NUM)* ")"\nNUM: /[1-9]/'))
    assert all(re.fullmatch(r"\([1-9](\+[1-9])*\)", o.text) for o in out)
    out = _run(llm, _params(grammar='root ::= "ab" [0-9]'))  # GBNF
    assert all(re.fullmatch(r"ab[0-9]", o.text) for o in out)
    out = _run(llm, _params(json_object=True))
    assert all(isinstance(json.loads(o.text), dict) for o in out if o.finish_reason == "stop")


def test_the_draft_keeps_only_what_the_grammar_allows(llm):
    compiler = compiler_for(llm.tokenizer, llm.model.args.vocab_size)
    m = compiler.matcher(StructuredOutputsParams(regex=r"(ab|ac|b)c*"))
    a, b, c, x = llm.tokenizer.encode("abcx")
    tree = DraftTree.from_paths([[a, b, c], [a, x, c], [b, c, c], [x, a], [a, c]])

    def allowed(m):
        return lambda: (
            np.unpackbits(np.frombuffer(m.compute_bitmask(), np.uint8), bitorder="little")[:259] > 0
        )

    out, forced = constrain_draft(tree, m, allowed(m), 64, True, {258})
    paths = {tuple(out.tokens[i] for i in out.path_to(n)) for n in range(len(out))}
    assert paths == {(a,), (a, b), (a, b, c), (b,), (b, c), (b, c, c), (a, c)}
    assert not forced and m.validate_tokens([a, b]) == 2  # the matcher is back at its start
    m = compiler.matcher(StructuredOutputsParams(regex="abc|abd"))
    out, forced = constrain_draft(DraftTree(), m, allowed(m), 64, True, {258})
    assert out.tokens == [a, b] and forced == {0, 1}  # then 'c' or 'd': the model's choice


def test_bad_grammars_are_one_line_errors(llm):
    bad = [
        dict(json={"type": "object", "properties": {"a": {"$ref": "#/nope"}}}),
        dict(json={"type": "frob"}),
        dict(regex="a(b"),
        dict(grammar='start: x\nx: x "a"'),
        dict(grammar="start: ("),
        dict(json="{not json"),
    ]
    for spec in bad:
        with pytest.raises(RequestError) as e:
            llm.generate("hi", _params(**spec))
        assert e.value.param == "structured_outputs" and "\n" not in str(e.value), spec
    with pytest.raises(ParaspecError, match="exactly one of"):
        StructuredOutputsParams(regex="a", choice=["b"])
    with pytest.raises(ParaspecError, match="ignore_eos"):
        SamplingParams(ignore_eos=True, structured_outputs=StructuredOutputsParams(regex="a"))


def test_without_the_library_the_error_names_the_extra(llm, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "llguidance", None)  # as if not installed
    with pytest.raises(RequestError, match=r"paraspec\[structured\]"):
        llm.generate("hi", _params(regex="a+"))
