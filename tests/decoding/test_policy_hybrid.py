"""The cost-aware arm selector, and the hybrid drafter's merged draft tree."""
import pytest

from paraspec.decoding.hybrid import HybridDrafter, HybridParams
from paraspec.decoding.policy import ArmSelector, CostModel
from paraspec.errors import ConfigError


def test_cost_model_interpolates_and_extrapolates_monotonically():
    c = CostModel({1: 1.0, 8: 1.0, 16: 1.2, 32: 1.8})
    assert c(1) == c(4) == 1.0
    assert c(16) == pytest.approx(1.2) and c(24) == pytest.approx(1.5)
    assert c(48) == pytest.approx(1.8 + 0.6 / 16 * 16)
    assert all(c(k) <= c(k + 1) for k in range(1, 200))


def test_arm_selector_settles_on_the_cheaper_arm_and_retries_the_other():
    sel = ArmSelector(2, epoch_steps=4, retry_after=5)
    tokens_per_cost = {0: 1.0, 1: 1.5}           # arm 1 is better
    pulls = []
    for _ in range(400):
        arm = sel.choose()
        pulls.append(arm)
        sel.update(tokens=tokens_per_cost[arm], cost=1.0)
    assert pulls[:4] == [0] * 4 and pulls[4:8] == [1] * 4     # both tried first
    assert pulls[200:].count(1) > 0.75 * 200                  # mostly the better arm
    assert pulls[200:].count(0) > 0                           # ... but the other is retried


def test_hybrid_params_split_a_flat_dict_and_validate_gamma():
    p = HybridParams.from_dict({"plugin_type": "hybrid", "decoding_length": 8, "level": 3, "window": 4})
    assert p.memory.decoding_length == 8 and p.lookahead.level == 3 and p.lookahead.window == 4
    assert p.query_tokens == 8 + 2 * 4 - 1
    with pytest.raises(ConfigError, match="speculation_gamma"):
        p.validate(10)
    with pytest.raises(ConfigError):
        HybridParams.from_dict({"decoding_length": 40}).validate()


def test_hybrid_merges_both_sources_within_budget():
    d = HybridDrafter(HybridParams.from_dict({"decoding_length": 6, "level": 3, "window": 3, "guess_set_size": 2}))
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3]
    d.begin("r", prompt)
    ctx = list(prompt)
    for _ in range(6):
        p = d.propose("r", ctx, 64)
        assert len(p.draft) <= 5
        assert len(set(zip(p.draft.parents, p.draft.tokens))) == len(p.draft)   # shared prefixes merged
        nxt = []
        for _ in range(2):                              # the text keeps repeating its period of 5
            nxt.append((ctx + nxt)[-5])
        argmax = [1] * len(p.lookahead.output_rows) if p.lookahead else None
        d.observe("r", nxt, argmax)
        ctx += nxt
    p = d.propose("r", ctx, 64)
    assert p.draft.tokens[:2] == [ctx[-5], ctx[-4]]      # the repeated continuation is drafted first
    d.end("r")
