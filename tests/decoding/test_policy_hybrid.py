"""The cost-aware arm selector, and the hybrid drafter's merged draft tree."""
import pytest

from drafters import WithContext
from paraspec.decoding.hybrid import HybridDrafter, HybridParams
from paraspec.decoding.policy import ArmSelector, ArmStats, CostModel
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
    assert pulls[8:].count(0) >= 2 * 4                        # ... but the other is retried


def test_a_new_request_starts_on_the_arm_its_drafter_learnt_and_exploration_is_paced_over_requests():
    shared = ArmStats(2, retry_after=4)
    value = {0: 1.0, 1: 1.5}                      # arm 1 is better
    first = ArmSelector(2, epoch_steps=3, shared=shared)
    pulls = []
    for _ in range(6):
        pulls.append(first.choose())
        first.update(value[pulls[-1]], 1.0)
    assert pulls == [0] * 3 + [1] * 3              # the first request explores both
    assert ArmSelector(2, epoch_steps=3, shared=shared).choose() == 1   # the next starts on the winner
    pulls = []
    for _ in range(40):                            # short requests: 3 epochs each
        sel = ArmSelector(2, epoch_steps=3, shared=shared)
        for _ in range(9):
            pulls.append(sel.choose())
            sel.update(value[pulls[-1]], 1.0)
    # the loser is still retried, but its waits double over all requests' epochs
    assert 0 < pulls.count(0) <= 0.05 * len(pulls)


def test_paired_scores_compare_arms_on_the_same_steps():
    # arm 1's epoch ran over easier text (more tokens a step) but on those very steps the
    # reference would have done better still: paired, arm 1 loses
    sel = ArmSelector(2, epoch_steps=2)
    for _ in range(2):
        sel.update(1.0, 1.0, base=(1.0, 1.0))          # arm 0 is the reference: scores 1
    assert sel.choose() == 1
    for _ in range(2):
        sel.update(3.0, 1.5, base=(2.5, 1.0))          # raw 2.0 tokens/cost, but 0.8x the reference's
    assert sel.shared.value == pytest.approx([1.0, 0.8])
    assert sel.choose() == 0


def test_a_supposed_arm_waits_as_a_loser_and_its_first_real_epoch_replaces_the_prior():
    shared = ArmStats(2, retry_after=4)
    shared.suppose(1, 0.7)                          # far behind arm 0's expected 1.0
    sel = ArmSelector(2, epoch_steps=2, shared=shared)
    pulls = []
    for _ in range(2 * 24):
        pulls.append(sel.choose())
        sel.update(1.0 if pulls[-1] == 0 else 1.3, 1.0)
    assert pulls.index(1) >= 2 * 4 * 4               # not explored first: waited 4x retry_after epochs
    assert shared.value[1] == pytest.approx(1.3)     # evidence replaced the prior (no blend with 0.7)
    shared.suppose(1, 0.1)                           # evidence exists: a prior no longer applies
    assert shared.value[1] == pytest.approx(1.3)
    # a prior at or above the reference changes nothing: arms are explored in index order
    ahead = ArmStats(2)
    ahead.suppose(0, 1.2)
    sel = ArmSelector(2, epoch_steps=2, shared=ahead)
    pulls = []
    for _ in range(4):
        pulls.append(sel.choose())
        sel.update(1.0, 1.0)
    assert pulls == [0, 0, 1, 1] and not any(ahead.supposed)


def test_hybrid_window_prior_follows_the_cost_curve():
    steep = WithContext(HybridDrafter(), {4: 1.0, 8: 1.25, 12: 1.4, 16: 1.55, 20: 1.75, 24: 1.95, 32: 2.4})
    flat = WithContext(HybridDrafter(), {4: 1.0, 8: 1.0, 16: 1.02, 32: 1.05})
    assert steep.window_prior(steep.cost) < 0.8 < 1.0 < flat.window_prior(flat.cost)
    for d in (steep, flat):
        d.begin("r", [1, 2, 3])
        assert d.arms.due() == 0                     # the trie alone is tried first, in both cases
        d.arms.record(0, 1.0)
    assert steep.arms.due() is None and steep.arms.best() == 0   # steep: the window waits
    assert flat.arms.due() == 1                                   # flat: the window is tried next


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


def test_tree_chooser_calibrates_each_sources_own_estimate_counterfactually():
    from paraspec.decoding.policy import TreeChooser
    from paraspec.decoding.tree import DraftTree
    cost = CostModel({1: 1.0, 4: 1.0, 8: 1.0, 16: 1.5})
    chooser = TreeChooser(TreeChooser.prior(2))
    claims = [2.0, 0.8]                           # source 0 over-promises, source 1 under-promises
    assert chooser.choose(1, [DraftTree.from_paths([[9, 9]]), DraftTree.from_paths([[7]])], claims, 0, cost) == 0
    context = [0]
    for i in range(40):
        right = DraftTree.from_paths([[100 + i]])                  # source 1 always guesses right
        wrong = DraftTree.from_paths([[9, 9, 9, 9], [8, 8, 8, 8]])  # source 0 never does
        chooser.observe(context)
        chooser.choose(len(context), [wrong, right], claims, 0, cost)
        context += [100 + i]     # whichever was verified, the text goes on the same way
    chooser.observe(context + [0] * 4)
    assert chooser.ratio(0, claims[0]) < 0.1 and chooser.ratio(1, claims[1]) > 1.1
    assert chooser.choose(len(context), [wrong, right], claims, 0, cost) == 1


def test_cost_model_free_rows_reads_the_staircase():
    c = CostModel({k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)})   # stairs of 4 rows
    assert [c.free_rows(r) for r in (1, 2, 4, 5, 7, 8)] == [3, 2, 0, 3, 1, 0]


def test_hybrid_fills_the_rows_the_forward_computes_anyway_with_pool_candidates(monkeypatch):
    import random
    import paraspec.decoding.policy as policy
    # a prior that favours the window: it runs from the second epoch on, so root + window + the
    # trie's tree leave room on their stair
    monkeypatch.setattr(policy, "WINDOW_PRIOR_GAIN", 10.0)
    d = WithContext(HybridDrafter(HybridParams.from_dict({"level": 4, "window": 1, "guess_set_size": 4})),
                    {k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)})
    rng = random.Random(0)
    prompt = [rng.randrange(8) for _ in range(300)]
    d.begin("r", prompt)
    ctx, filled = list(prompt), 0
    for _ in range(40):
        p = d.propose("r", ctx, 64)
        trie = d._requests["r"].memory_tree
        rows = 1 + len(p.draft) + (len(p.lookahead.tokens) if p.lookahead else 0)
        missing = [c for c in d.lookahead.candidates("r") if p.draft.follow(c) < len(c)]
        if trie and missing:     # room left on the stair would have been filled
            assert d.cost.free_rows(rows) == 0 or len(p.draft) == 15
        if trie and len(p.draft) > len(trie):
            assert p.draft.tokens[:len(trie)] == trie.tokens      # the trie's tree, then the fill
            filled += 1
        argmax = [rng.randrange(8) for _ in p.lookahead.output_rows] if p.lookahead else None
        tok = rng.randrange(8)
        d.observe("r", [tok], argmax)
        ctx.append(tok)
    assert filled >= 5


def test_hybrid_lets_lookahead_sit_out_while_the_tries_tree_fills_its_stair():
    d = WithContext(HybridDrafter(HybridParams.from_dict({"level": 4, "window": 1, "guess_set_size": 4})),
                    {k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)})
    period = list(range(10, 20))
    d.begin("r", period * 8)
    ctx, proposed, sat_out = period * 8, [], 0
    propose = d.lookahead.propose
    d.lookahead.propose = lambda *a, **k: proposed.append(1) or propose(*a, **k)
    for _ in range(12):
        p = d.propose("r", ctx, 64)
        if not d._requests["r"].lookahead_ran:
            sat_out += 1
            assert d.cost.free_rows(1 + len(p.draft)) == 0 or len(p.draft) == 15
            # the next step's "after a hit" state must come from this step, not a jump over it
            assert d.lookahead._state("r").sizer._last_len == len(ctx)
        truth = [period[(len(ctx) + i) % 10] for i in range(16)]
        committed = truth[:p.draft.follow(truth) + 1]
        d.observe("r", committed)
        ctx = ctx + committed
    assert sat_out >= 6 and len(proposed) + sat_out == 12


def test_hybrid_lookahead_sits_out_where_its_nodes_add_nothing_and_is_still_probed(monkeypatch):
    import random
    import paraspec.decoding.hybrid as hybrid
    monkeypatch.setattr(hybrid, "WINDOW_BELOW", -1.0)        # no window: the pool alone is judged
    d = WithContext(HybridDrafter(HybridParams.from_dict({"level": 4, "window": 1, "guess_set_size": 4})),
                    {k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)})
    rng = random.Random(0)
    ctx = [rng.randrange(400) for _ in range(100)]          # the trie often finds nothing
    d.begin("r", ctx)
    ran = []
    for _ in range(600):                     # novel text: neither drafter guesses right
        p = d.propose("r", ctx, 64)
        st = d._requests["r"]
        ran.append(st.lookahead_ran)
        tok = rng.randrange(400)
        while p.draft.follow([tok]):         # nothing is ever accepted
            tok = rng.randrange(400)
        d.observe("r", [tok])
        ctx.append(tok)
    assert d.lookahead_gain < hybrid.LA_MIN_GAIN
    assert d._eligible > 0 and 0 < sum(ran[-200:]) <= 200 // hybrid.LA_PROBE_EVERY + 1   # probed only
    # where its nodes are accepted, what they add raises the estimate again
    d.lookahead_gain = 0.0
    st.lookahead_ran, st.arm, st.memory_tree = True, 0, None
    d.observe("r", [1, 2, 3])                # two draft tokens accepted, none of them the trie's
    assert d.lookahead_gain == pytest.approx(2 * hybrid.LA_GAIN_ALPHA)


def test_lookahead_tries_its_window_first_only_where_the_cost_curve_says_rows_are_cheap():
    from paraspec.decoding.lookahead import LookaheadDrafter
    prompt = [1, 2, 3, 4, 5] * 10
    steep = WithContext(LookaheadDrafter(), {4: 1.0, 8: 1.25, 12: 1.4, 16: 1.55, 20: 1.75, 24: 1.95, 32: 2.4})
    flat = WithContext(LookaheadDrafter(), {1: 1.0, 4096: 1.0})
    for d in (steep, flat):
        d.begin("r", prompt)
    assert steep.propose("r", prompt, 64).lookahead is None        # the pool alone first
    assert flat.propose("r", prompt, 64).lookahead is not None     # the window first (LADE, MindIE)
    assert steep.arms.supposed[0] and not flat.arms.supposed[0]
