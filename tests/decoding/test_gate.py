"""DraftGate: a sequence whose looks do not pay skips them, backing off; a look that pays opens it
again; looks that pay on average keep it open. And in the engine: with the gate, a drafter that
is never right is asked less often, and the output is the same either way."""

from drafters import RandomTreeDrafter
from paraspec import LLM, SamplingParams
from paraspec.decoding.policy.gate import MAX_SKIP, WARMUP, DraftGate

PLAIN = 5e-3  # seconds of a one-row step


def step(gate: DraftGate, tokens: int, rows_cost: float, propose_s: float = 3e-4) -> bool:
    """One step as the engine runs it; whether it looked."""
    looked = gate.look()
    gate.update(
        looked,
        tokens if looked else 1,
        PLAIN * (rows_cost if looked else 1.0),
        rows_cost if looked else 1.0,
        propose_s if looked else 0.0,
        1e-4,
    )
    return looked


def test_looks_that_never_pay_back_off_to_max_skip():
    gate = DraftGate()
    looks = [step(gate, 1, 1.2) for _ in range(200)]
    assert all(looks[:WARMUP])
    # after the warm-up, gaps of 1, 2, ... skipped steps, then MAX_SKIP for good
    gaps, run = [], 0
    for looked in looks[WARMUP:]:
        if looked:
            gaps.append(run)
            run = 0
        else:
            run += 1
    assert gaps[:4] == [1, 2, 4, 4] and MAX_SKIP == 4
    assert set(gaps[3:]) == {MAX_SKIP}
    assert sum(looks) < WARMUP + 200 // (MAX_SKIP + 1) + 4


def test_a_look_that_pays_opens_the_gate():
    gate = DraftGate()
    for _ in range(60):
        step(gate, 1, 1.2)
    while not gate.look():  # to the next look: it finds a copy (6 tokens for 2.5 steps' time)
        gate.update(False, 1, PLAIN, 1.0, 0.0, 1e-4)
    gate.update(True, 6, PLAIN * 2.5, 2.5, 3e-4, 1e-4)
    assert [step(gate, 6, 2.5) for _ in range(20)] == [True] * 20


def test_looks_that_pay_on_average_keep_it_open():
    """A copy every fifth look: most looks lose, the average wins."""
    gate = DraftGate()
    assert all(step(gate, 8 if i % 5 == 0 else 1, 3.0 if i % 5 == 0 else 1.1) for i in range(200))


class VirtualClock:
    """The engine's clock (PhaseTimer's time.perf_counter) moving only where the test says: a
    forward takes FORWARD seconds, a look LOOK more, everything else none. The gate then sees the
    same seconds on every machine, loaded or not, so what it decides does not depend on this one."""

    FORWARD, LOOK = 2e-3, 5e-3

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_engine_asks_a_drafter_that_is_never_right_less_often(tiny_model_dir, monkeypatch):
    import paraspec.decoding.contract.stats as stats

    llm = LLM(
        str(tiny_model_dir("llama", n_layers=2, hidden=64, heads=4, kv_heads=2)), dtype="float32"
    )
    vocab = llm.model.args.vocab_size
    params = SamplingParams(temperature=0, max_tokens=80, ignore_eos=True)
    ar = llm.generate(["a b c"], params)[0]
    clock = VirtualClock()
    monkeypatch.setattr(stats, "time", clock)
    verify = llm.runner.verify

    def timed_verify(*a, **k):
        clock.now += clock.FORWARD
        return verify(*a, **k)

    monkeypatch.setattr(llm.runner, "verify", timed_verify)
    calls = {}
    for gated in (False, True):
        # a draft of a token that is never the next one, and a look dearer than a step: a loss
        wrong = [t for t in range(vocab) if t not in set(ar.token_ids)][:1]
        drafter = RandomTreeDrafter(vocab, nodes=1, tokens=wrong)
        propose, n = drafter.propose, [0]

        def counted(*a, **k):
            n[0] += 1
            clock.now += clock.LOOK
            return propose(*a, **k)

        drafter.propose = counted
        llm.engine.draft_gate, llm.engine.default_drafter = gated, drafter
        out = llm.generate(["a b c"], params)[0]
        llm.engine.default_drafter = None
        assert out.token_ids == ar.token_ids
        calls[gated] = n[0]
    llm.engine.draft_gate = True
    assert calls[False] == 78  # every decode step but the last (one token left: no draft)
    # the warm-up, then a look in every MAX_SKIP + 1 steps: exactly, on the virtual clock
    assert WARMUP <= calls[True] <= WARMUP + (78 - WARMUP) // (MAX_SKIP + 1) + 4
