"""bench/replayed_speedup.py: the replay of each drafter, the lookahead window's rows priced."""

import random

from paraspec.bench.replayed_speedup import DRAFTERS, SMOLLM2_EOS, replay_priced, replayed_speedups
from paraspec.decoding.policy.cost import CostModel
from paraspec.tools.records import Record
from paraspec.tools.replay import replay_groups

NEARLY_FLAT = CostModel({1: 1.0, 64: 1.3})  # rows cheap: the lookahead window runs


def _records() -> list[Record]:
    rng = random.Random(1)
    out = []
    for _ in range(3):
        prompt = [rng.randrange(3, 400) for _ in range(300)]
        a = rng.randrange(0, 200)
        out.append(
            Record(prompt, prompt[a : a + 40] + [rng.randrange(3, 400) for _ in range(30)], "g")
        )
    return out


def test_the_window_is_priced_and_nothing_else_changes():
    recs = _records()
    la = DRAFTERS["lookahead"]
    priced, rows = replay_priced(la, recs, NEARLY_FLAT)
    plain = replay_groups(la, recs, SMOLLM2_EOS, NEARLY_FLAT)["g"]
    assert rows > 0
    assert (priced.steps, priced.tokens, priced.accepted) == (
        plain.steps,
        plain.tokens,
        plain.accepted,
    )
    assert priced.cost > plain.cost
    assert sum(c for _, c, _ in priced.per_request) == priced.cost


def test_a_drafter_without_a_window_replays_as_before():
    recs = _records()
    md = DRAFTERS["memory_decoding"]
    priced, rows = replay_priced(md, recs, NEARLY_FLAT)
    plain = replay_groups(md, recs, SMOLLM2_EOS, NEARLY_FLAT)["g"]
    assert rows == 0
    assert (priced.steps, priced.tokens, priced.cost) == (plain.steps, plain.tokens, plain.cost)


def test_speedups_per_drafter_and_set():
    recs = _records() + [Record(r.prompt, r.output, "h") for r in _records()[:1]]
    out = replayed_speedups(recs, {1: 1.0, 16: 1.2, 64: 2.0}, 0.05)
    assert set(out) == set(DRAFTERS) and all(set(v) == {"g", "h"} for v in out.values())
    # a copy of the prompt to draft from, at nearly free rows: memory_decoding beats plain decoding
    assert out["memory_decoding"]["g"]["median_request_speedup"] > 1.2
    assert out["memory_decoding"]["g"]["tokens_per_step"] > 1.5
