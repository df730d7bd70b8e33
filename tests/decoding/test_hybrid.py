"""The hybrid drafter: the trie and the pool as two sources of one draft tree, the pool sitting
out where it adds nothing, the Jacobi window where it pays."""

import random

import pytest

from drafters import WithContext
from paraspec.decoding.drafters.memory_decoding import COPYING
from paraspec.decoding.drafters.hybrid import POOL, HybridDrafter, HybridParams
from paraspec.errors import ConfigError

STAIRS = {k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)}  # rows cost in stairs of 4


def test_hybrid_window_prior_follows_the_cost_curve():
    steep = WithContext(
        HybridDrafter(), {4: 1.0, 8: 1.25, 12: 1.4, 16: 1.55, 20: 1.75, 24: 1.95, 32: 2.4}
    )
    flat = WithContext(HybridDrafter(), {4: 1.0, 8: 1.0, 16: 1.02, 32: 1.05})
    assert steep.window_prior(steep.cost) < 0.8 < 1.0 < flat.window_prior(flat.cost)
    for d in (steep, flat):
        d.begin("r", [1, 2, 3])
        assert d.arms.due() == 0  # the trie alone is tried first, in both cases
        d.arms.record(0, 1.0)
    assert steep.arms.due() is None and steep.arms.best() == 0  # steep: the window waits
    assert flat.arms.due() == 1  # flat: the window is tried next


def test_hybrid_params_split_a_flat_dict_and_validate_gamma():
    p = HybridParams.from_dict(
        {"plugin_type": "hybrid", "decoding_length": 8, "level": 3, "window": 4}
    )
    assert p.memory.decoding_length == 8 and p.lookahead.level == 3 and p.lookahead.window == 4
    assert p.query_tokens == 8 + 2 * 4 - 1
    with pytest.raises(ConfigError, match="speculation_gamma"):
        p.validate(10)
    with pytest.raises(ConfigError):
        HybridParams.from_dict({"decoding_length": 40}).validate()


def test_hybrid_merges_both_sources_within_budget():
    d = HybridDrafter(
        HybridParams.from_dict({"decoding_length": 6, "level": 3, "window": 3, "guess_set_size": 2})
    )
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3]
    d.begin("r", prompt)
    ctx = list(prompt)
    mp = d.params.memory
    for _ in range(6):
        copying = d.policy.state("r") == COPYING  # the text follows the trie's tree: a copy
        p = d.propose("r", ctx, 64)
        assert (
            len(p.draft) <= mp.max_draft + (mp.copy_length if copying else 0) and mp.max_draft == 5
        )
        # shared prefixes merged
        assert len(set(zip(p.draft.parents, p.draft.tokens))) == len(p.draft)
        nxt = []
        for _ in range(2):  # the text keeps repeating its period of 5
            nxt.append((ctx + nxt)[-5])
        argmax = [1] * len(p.lookahead.output_rows) if p.lookahead else None
        d.observe("r", nxt, argmax)
        ctx += nxt
    p = d.propose("r", ctx, 64)
    assert p.draft.tokens[:2] == [ctx[-5], ctx[-4]]  # the repeated continuation is drafted first
    d.end("r")


def test_hybrid_fills_the_rows_the_forward_computes_anyway_with_pool_candidates(monkeypatch):
    import paraspec.decoding.policy.cost as cost

    # a prior that favours the window: it runs from the second epoch on, so root + window + the
    # trie's tree leave room on their stair
    monkeypatch.setattr(cost, "WINDOW_PRIOR_GAIN", 10.0)
    d = WithContext(
        HybridDrafter(HybridParams.from_dict({"level": 4, "window": 1, "guess_set_size": 4})),
        STAIRS,
    )
    rng = random.Random(0)
    prompt = [rng.randrange(8) for _ in range(300)]
    d.begin("r", prompt)
    ctx, filled = list(prompt), 0
    for _ in range(40):
        p = d.propose("r", ctx, 64)
        st = d._requests["r"]
        rows = 1 + len(p.draft) + (len(p.lookahead.tokens) if p.lookahead else 0)
        if st.pool_ran:
            missing = [c for c in d.pool.candidates("r") if p.draft.follow(c) < len(c)]
            if st.memory_tree and missing:  # room left on the stair would have been filled
                assert d.cost.free_rows(rows) == 0 or len(p.draft) == 15
            if st.memory_tree and len(p.draft) > len(st.memory_tree):
                filled += 1
        argmax = [rng.randrange(8) for _ in p.lookahead.output_rows] if p.lookahead else None
        tok = rng.randrange(8)
        d.observe("r", [tok], argmax)
        ctx.append(tok)
    assert filled >= 1  # pool nodes went out beside the trie's


def test_hybrid_lets_the_pool_sit_out_while_the_tries_tree_fills_its_stair():
    d = WithContext(
        HybridDrafter(HybridParams.from_dict({"level": 4, "window": 1, "guess_set_size": 4})),
        STAIRS,
    )
    period = list(range(10, 20))
    d.begin("r", period * 8)
    ctx, proposed, sat_out = period * 8, [], 0
    step = d.pool.step
    d.pool.step = lambda *a, **k: proposed.append(1) or step(*a, **k)
    for _ in range(12):
        p = d.propose("r", ctx, 64)
        if not d._requests["r"].pool_ran:
            sat_out += 1
            assert d.cost.free_rows(1 + len(p.draft)) == 0 or len(p.draft) == 15
        truth = [period[(len(ctx) + i) % 10] for i in range(16)]
        committed = truth[: p.draft.follow(truth) + 1]
        d.observe("r", committed)
        ctx = ctx + committed
    assert sat_out >= 6 and len(proposed) + sat_out == 12


def test_hybrid_pool_sits_out_where_its_nodes_add_nothing_and_is_still_probed(monkeypatch):
    import paraspec.decoding.drafters.hybrid as hybrid

    monkeypatch.setattr(hybrid, "WINDOW_BELOW", -1.0)  # no window: the pool alone is judged
    d = WithContext(
        HybridDrafter(HybridParams.from_dict({"level": 4, "window": 1, "guess_set_size": 4})),
        STAIRS,
    )
    rng = random.Random(0)
    ctx = [rng.randrange(400) for _ in range(100)]  # the trie often finds nothing
    d.begin("r", ctx)
    ran = []
    for _ in range(600):  # novel text: neither source guesses right
        p = d.propose("r", ctx, 64)
        ran.append(d._requests["r"].pool_ran)
        tok = rng.randrange(400)
        while p.draft.follow([tok]):  # nothing is ever accepted
            tok = rng.randrange(400)
        d.observe("r", [tok])
        ctx.append(tok)
    assert d.policy.stats.gain[POOL] < hybrid.LA_MIN_GAIN
    # probed only
    assert d._eligible > 0 and 0 < sum(ran[-200:]) <= 200 // hybrid.LA_PROBE_EVERY + 1


def test_lookahead_tries_its_window_first_only_where_the_cost_curve_says_rows_are_cheap():
    from paraspec.decoding.drafters.lookahead import LookaheadDrafter

    prompt = [1, 2, 3, 4, 5] * 10
    steep = WithContext(
        LookaheadDrafter(), {4: 1.0, 8: 1.25, 12: 1.4, 16: 1.55, 20: 1.75, 24: 1.95, 32: 2.4}
    )
    flat = WithContext(LookaheadDrafter(), {1: 1.0, 4096: 1.0})
    for d in (steep, flat):
        d.begin("r", prompt)
    assert steep.propose("r", prompt, 64).lookahead is None  # the pool alone first
    assert flat.propose("r", prompt, 64).lookahead is not None  # the window first (LADE, MindIE)
    assert steep.arms.supposed[0] and not flat.arms.supposed[0]
