"""The bundled model under a JSON schema: memory_decoding's drafts and the grammar's forced tokens give
exactly the tokens plain constrained decoding gives, and the output is the schema's JSON."""

from __future__ import annotations

import json

import pytest

from paraspec import SamplingParams, StructuredOutputsParams

pytest.importorskip("llguidance")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "age", "city"],
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 30},
    },
}
MEMORY = {"plugin_type": "memory_decoding", "decoding_length": 16}


@pytest.mark.slow
def test_memory_decoding_under_a_schema_equals_plain(bundled_llm_default):
    llm = bundled_llm_default
    conv = [
        {
            "role": "user",
            "content": "Extract name, age and city as JSON: Maria Lopez, 34, lives in Madrid.",
        }
    ]
    params = SamplingParams(
        temperature=0, max_tokens=48, structured_outputs=StructuredOutputsParams(json=SCHEMA)
    )
    plain = llm.chat(conv, params, plugin_params="")[0]
    par = llm.chat(conv, params, plugin_params=MEMORY)[0]
    assert par.token_ids == plain.token_ids
    doc = json.loads(plain.text)
    assert set(doc) == {"name", "age", "city"} and type(doc["age"]) is int
    assert plain.stats["accepted_forced_tokens"] >= 6  # {", name, ":, age keys and the closing
    assert plain.stats["decode_steps"] < len(plain.token_ids) - 6
