"""Fair admission across client requests and chunked prefill interleaved with decode steps: the
schedule changes when tokens come, never which tokens (greedy and seeded sampling, with drafts)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from drafters import RandomTreeDrafter
from paraspec import LLM, SamplingParams
from paraspec.scheduler import fair_pick

CHUNK = 16


@dataclass
class S:
    group: str


def test_fair_pick_prefers_the_group_holding_the_fewest():
    waiting = [S("big")] * 5 + [S("small")] + [S("other")]
    assert fair_pick(waiting, []) == 0  # nobody holds anything: arrival order
    assert fair_pick(waiting, [S("big")]) == 5  # small holds none
    assert fair_pick(waiting, [S("big"), S("small")]) == 6
    assert fair_pick(waiting, [S("big"), S("small"), S("other"), S("big")]) == 5


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    # no prefix cache: these tests count the chunks of prompts they prefilled alone just before
    llm = LLM(
        str(tiny_model_dir("llama", n_layers=2, hidden=64, heads=4, kv_heads=2)),
        dtype="float32",
        max_batch_size=4,
        prefix_cache_mb=0,
    )
    llm.engine.runner.prefill_chunk = CHUNK
    return llm


def _alone(llm, prompt, params, drafter=None):
    llm.engine.default_drafter = drafter
    try:
        return llm.generate([prompt], params)[0].token_ids
    finally:
        llm.engine.default_drafter = None


def _steps(engine):
    """Step to the end; per step: the request prefilled (None for a decode step), which requests'
    sequences got tokens; and the tokens per key."""
    log, tokens = [], {}
    while engine.has_work():
        decodes = engine.steps
        updates = engine.step()
        prefilled = None
        if engine.steps == decodes:
            prefilled = (
                engine.prefilling[0].request_id if engine.prefilling else updates[0].seq.request_id
            )
        log.append((prefilled, sorted({u.seq.request_id for u in updates})))
        for u in updates:
            assert u.error is None
            tokens.setdefault(u.seq.key, []).extend(u.new_token_ids)
    return log, tokens


@pytest.mark.parametrize("drafted", [False, True])
def test_a_long_prefill_takes_turns_with_the_running_decode(llm, drafted):
    tok = llm.tokenizer
    short = tok.encode("hello world")
    long = tok.encode("The quick brown fox jumps over the lazy dog. " * 4)  # ~180 tokens: 12 chunks
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    drafter = RandomTreeDrafter(llm.model.args.vocab_size, nodes=5, seed=3) if drafted else None
    want = {
        "short": _alone(llm, short, params, drafter),
        "long": _alone(llm, long, params, drafter),
    }
    engine = llm.engine
    engine.add_request(short, params, "short", drafter)
    (first,) = engine.step()  # short: prefilled, running
    engine.add_request(long, params, "long", drafter)
    log, tokens = _steps(engine)
    tokens["short"] = first.new_token_ids + tokens["short"]
    assert tokens == want  # the schedule never changes the tokens
    chunks = -(-len(long) // CHUNK)
    # while long is prefilling, every chunk step is followed by a decode step of short
    prefill_steps = [i for i, (p, _) in enumerate(log) if p == "long"]
    assert len(prefill_steps) == chunks
    assert all(log[i + 1][1] == ["short"] for i in prefill_steps[:-1])


def test_n_samples_share_the_prefill_while_another_request_interleaves(llm):
    tok = llm.tokenizer
    params = SamplingParams(temperature=0.8, seed=7, n=3, max_tokens=12, ignore_eos=True)
    other = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    p1, p2 = tok.encode("Once upon a time " * 6), tok.encode("1, 2, 3,")
    want = llm.generate([p1], params)[0]
    want_other = _alone(llm, p2, other)
    engine = llm.engine
    engine.add_request(p1, params, "sampled", group="a")
    engine.add_request(p2, other, "other", group="b")
    _, tokens = _steps(engine)
    assert [tokens[f"sampled-{i}"] for i in range(3)] == [o.token_ids for o in want.outputs]
    assert tokens["other"] == want_other
    assert not engine._twin_logits  # kept only while siblings wait


def test_a_small_request_is_not_starved_by_a_large_one(llm):
    """Request A: 12 sequences (3 prompts x n=4); request B: 1 sequence, sent after A. B is
    admitted at the first free slot, not after A's 12 prefills."""
    tok = llm.tokenizer
    big = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, n=4)
    small = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    engine = llm.engine
    for i in range(3):
        engine.add_request(tok.encode(f"prompt number {i}"), big, f"A-{i}", group="A")
    engine.add_request(tok.encode("hi"), small, "B", group="B")
    log, tokens = _steps(engine)
    first_b = next(i for i, (_, got) in enumerate(log) if "B" in got)
    last_a = max(i for i, (_, got) in enumerate(log) if any(r.startswith("A") for r in got))
    assert first_b < last_a / 3, (first_b, last_a)
    assert tokens["B"] == _alone(llm, tok.encode("hi"), small)


def test_a_short_prompt_overtakes_a_long_prefill(llm):
    """A prompt that arrives while a long one is mid-prefill is prefilled first (fewest tokens
    left), so its first token does not wait for the whole long prompt."""
    tok = llm.tokenizer
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    long, short = tok.encode("word " * 150), tok.encode("hi")
    engine = llm.engine
    engine.add_request(long, params, "long")
    engine.step()  # long's first chunk
    engine.add_request(short, params, "short")
    log, tokens = _steps(engine)
    first_short = next(i for i, (_, got) in enumerate(log) if "short" in got)
    first_long = next(i for i, (_, got) in enumerate(log) if "long" in got)
    assert first_short < first_long
    assert tokens["short"] == _alone(llm, short, params) and tokens["long"] == _alone(
        llm, long, params
    )


def test_abort_while_prefilling_frees_it(llm):
    engine = llm.engine
    engine.add_request(llm.tokenizer.encode("word " * 100), SamplingParams(max_tokens=4), "gone")
    engine.step()
    assert engine.prefilling and engine.prefilling[0].cache is not None
    engine.abort("gone")
    assert not engine.prefilling and not engine.has_work()
