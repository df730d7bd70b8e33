"""One sequence's failure (its drafter, sampler or detokenizer raising) ends that sequence alone:
every other sequence of the running batch gives exactly the tokens of the undisturbed run."""

import pytest

from drafters import RandomTreeDrafter
from paraspec import LLM, SamplingParams
from paraspec.engine import Engine

PROMPTS = ["hello world", "def f(x):\n    return", "The quick brown fox", "1, 2, 3, 4,"]
VICTIM = "r1"


class Boom(RuntimeError):
    pass


class FailingDrafter(RandomTreeDrafter):
    """Random trees; proposing for the victim raises at its third step."""

    def __init__(self, vocab: int):
        super().__init__(vocab, nodes=6, seed=4)
        self.calls = 0

    def propose(self, request_id, context, max_nodes, ctx=None):
        if request_id == VICTIM:
            self.calls += 1
            if self.calls == 3:
                raise Boom("drafter")
        return (
            super().propose(request_id, context, max_nodes)
            if ctx is None
            else super().propose(request_id, context, max_nodes, ctx)
        )


def _fail_after(fn, n: int, what: str):
    calls = [0]

    def wrapped(*a, **kw):
        calls[0] += 1
        if calls[0] == n:
            raise Boom(what)
        return fn(*a, **kw)

    return wrapped


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(
        str(tiny_model_dir("llama", n_layers=2, hidden=64, heads=4, kv_heads=2)), dtype="float32"
    )


def _run(engine: Engine, params: SamplingParams, drafter, inject: str | None):
    seqs = {}
    for i, p in enumerate(PROMPTS):
        (seq,) = engine.add_request(engine.tokenizer.encode(p), params, f"r{i}", drafter)
        seqs[seq.request_id] = seq
    victim = seqs[VICTIM]
    if inject == "draw":
        victim.sampler.draw = _fail_after(victim.sampler.draw, 4, "sampler")
    elif inject == "emit":
        victim.detok.push = _fail_after(victim.detok.push, 5, "detokenizer")
    errors = {}
    while engine.has_work():
        for u in engine.step():
            if u.error is not None:
                errors[u.seq.request_id] = u.error
    return {rid: (s.output, s.finish_reason) for rid, s in seqs.items()}, errors


@pytest.mark.parametrize("inject", ["propose", "draw", "emit"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_failing_sequence_never_disturbs_the_others(llm, inject, temperature):
    engine = llm.engine
    vocab = llm.model.args.vocab_size
    params = SamplingParams(temperature=temperature, seed=7, max_tokens=30, ignore_eos=True)
    if inject == "draw" and temperature == 0.0:
        params = SamplingParams(
            temperature=0.0, max_tokens=30, ignore_eos=True, repetition_penalty=1.1
        )
    clean, errors = _run(engine, params, RandomTreeDrafter(vocab, nodes=6, seed=4), None)
    assert not errors
    drafter = (
        FailingDrafter(vocab) if inject == "propose" else RandomTreeDrafter(vocab, nodes=6, seed=4)
    )
    hit, errors = _run(engine, params, drafter, inject)
    assert list(errors) == [VICTIM] and isinstance(errors[VICTIM], Boom)
    assert hit[VICTIM][1] == "error" and len(hit[VICTIM][0]) < 30
    for rid in clean:
        if rid != VICTIM:
            assert hit[rid] == clean[rid], rid
    assert not engine.running and not engine.waiting


def test_offline_generate_raises_the_sequences_error_and_leaves_nothing_behind(llm):
    engine = llm.engine
    engine.default_drafter = FailingDrafter(llm.model.args.vocab_size)
    try:
        engine.add_request(engine.tokenizer.encode("hi"), SamplingParams(max_tokens=5), "other")
        (victim,) = engine.add_request(
            engine.tokenizer.encode("yo"),
            SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
            VICTIM,
        )
        with pytest.raises(Boom):
            engine.run_until_done()
    finally:
        engine.default_drafter = None
    assert not engine.running and not engine.waiting
    assert llm.generate(["hello world"], SamplingParams(temperature=0, max_tokens=5))[0].token_ids
