"""The opt-in `paraspec.steps` trace on stream chunks (what the playground page draws), on a live
server over a tiny random model whose drafter knows the reference output (OracleDrafter), so every
step's draft and acceptance are known in advance. Without the opt-in, chunks stay plain OpenAI.
"""

from __future__ import annotations

import json

import openai
import pytest

from drafters import OracleDrafter
from paraspec import LLM, SamplingParams
from paraspec.server import create_app
from live_server import LiveServer
from test_server import MODEL, _config  # the tiny server's config (same folder, on sys.path)

PROMPT = "x = [1, 2, 3]\ny ="  # greedy: 20 ASCII characters from this tiny model
MAX_TOKENS = 20
DEPTH = 3  # OracleDrafter: DEPTH true tokens a step, each after a random decoy sibling
STEPS_ON = {"paraspec": {"stream_steps": True}}


@pytest.fixture(scope="module")
def reference(model_dir):
    """(prompt ids, greedy output ids, output text) from offline autoregressive decoding."""
    out = LLM(str(model_dir), dtype="float32").generate(
        PROMPT, SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    )[0]
    return out.prompt_token_ids, out.outputs[0].token_ids, out.outputs[0].text


@pytest.fixture(scope="module")
def server(model_dir, reference):
    prompt, output, _ = reference
    llm = LLM(str(model_dir), dtype="float32")
    llm.engine.default_drafter = OracleDrafter(
        prompt + output, llm.model.args.vocab_size, depth=DEPTH, seed=3
    )
    with LiveServer(create_app(llm, _config(model_dir))) as s:
        yield s


def expected_steps(n_out: int) -> list[tuple[int, int, int, int]]:
    """(step, tokens, drafted, accepted) the oracle must produce: the prefill's token, then per step a
    draft of DEPTH (decoy, true) pairs cut to the engine's budget (tokens left - 1), all trues accepted
    plus the model's own token."""
    steps, emitted = [(0, 1, 0, 0)], 1
    while emitted < n_out:
        budget = n_out - emitted - 1
        drafted = min(2 * DEPTH, budget)
        accepted = drafted // 2
        steps.append((len(steps), accepted + 1, drafted, accepted))
        emitted += accepted + 1
    return steps


def _stream(server, extra: dict) -> tuple[str, list[dict]]:
    """(text, every paraspec.steps entry) of a streamed greedy completion."""
    chunks = list(
        server.client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True, **extra},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    steps = [s for c in chunks for s in ((c.model_extra.get("paraspec") or {}).get("steps") or [])]
    return text, steps


def test_steps_trace_a_known_draft(server, reference):
    _, output, ref_text = reference
    text, steps = _stream(server, STEPS_ON)
    assert text == ref_text  # lossless, and the trace changes no text
    got = [(s["step"], s["tokens"], s["drafted"], s["accepted"]) for s in steps]
    assert got == expected_steps(len(output))
    assert sum(s["tokens"] for s in steps) == len(output)
    # the offsets tile the text: each step's drafts' text, then its own token's, in order
    at = 0
    for s in steps:
        start, own, end = s["text"]
        assert start == at and start <= own <= end
        at = end
    assert at == len(text)
    # one character per token here (byte-level tokenizer, ASCII output): the split is exact
    assert text.isascii() and len(text) == len(output)
    tok = server.app.state.serving_completion.tokenizer
    i = 0
    for s in steps:
        run, (start, own, end) = output[i : i + s["tokens"]], s["text"]
        i += s["tokens"]
        assert text[start:own] == tok.decode(run[:-1]) and text[own:end] == tok.decode(run[-1:])


def test_steps_follow_text_held_back_for_a_stop_string(server, reference):
    """A stop string holds text back across steps and cuts the last run: the steps still tile the
    text the client gets, each riding on the chunk that sends (the end of) its text."""
    _, _, ref_text = reference
    # steps end after characters 1, 5, 9, ... (one token, then 1 + DEPTH a step); this stop string
    # starts inside step 1 and ends inside step 2, so step 1's text is held back, then cut
    stop = ref_text[2:6]
    assert ref_text.index(stop) == 2
    chunks = list(
        server.client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            stop=[stop],
            extra_body={"ignore_eos": True, **STEPS_ON},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == ref_text[: ref_text.index(stop)]
    at, sent = 0, 0
    for c in chunks:
        sent += len(c.choices[0].text) if c.choices else 0
        for s in (c.model_extra.get("paraspec") or {}).get("steps", []):
            start, own, end = s["text"]
            assert start == at and start <= own <= end <= sent
            at = end
    assert at == len(text) == sent == 2


def test_steps_on_chat_chunks_and_on_the_last_chunk_with_stats(server):
    messages = [{"role": "user", "content": "hi"}]
    chunks = list(
        server.client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=12,
            temperature=0,
            stream=True,
            extra_body=STEPS_ON,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    exts = [c.model_extra.get("paraspec") for c in chunks]
    assert exts[0] is None  # the role chunk has no step
    steps = [s for e in exts if e for s in e.get("steps", [])]
    assert steps[0]["step"] == 0 and [s["step"] for s in steps] == list(range(len(steps)))
    assert steps[-1]["text"][2] == len(text)
    last = exts[-1]
    assert last["index"] == 0 and last["decode_steps"] == len(steps) - 1  # stats ride along
    assert last["accepted_draft_tokens"] == sum(s["accepted"] for s in steps)


def test_default_stream_chunks_are_unchanged(server):
    """Without the opt-in a plain OpenAI client sees what it always saw: `paraspec` is null on every
    chunk but a sample's last (its statistics), and no chunk mentions steps."""
    with server.http.stream(
        "POST",
        "/v1/completions",
        json={
            "prompt": PROMPT,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": True,
            "ignore_eos": True,
        },
    ) as r:
        events = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for c in chunks:
        assert set(c) == {"id", "created", "model", "choices", "usage", "paraspec", "object"}
        assert c["object"] == "text_completion" and c["usage"] is None
        assert set(c["choices"][0]) == {"index", "text", "logprobs", "finish_reason"}
    assert all(c["paraspec"] is None for c in chunks[:-1])
    assert "steps" not in chunks[-1]["paraspec"] and chunks[-1]["paraspec"]["index"] == 0
    assert '"steps"' not in "".join(events)


@pytest.mark.parametrize("body", [{"stream_steps": True}, {"stream_steps": "yes"}])
def test_stream_steps_needs_a_stream_and_a_boolean(server, body):
    stream = body["stream_steps"] == "yes"
    with pytest.raises(openai.BadRequestError) as e:
        server.client.completions.create(
            model=MODEL, prompt="x", max_tokens=2, stream=stream, extra_body={"paraspec": body}
        )
    assert e.value.body["param"] == "paraspec.stream_steps"
