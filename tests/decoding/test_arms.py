"""ArmStats / ArmSelector: which drafting configuration pays, learnt across requests."""

import pytest

from paraspec.decoding.drafters.arms import ArmSelector, ArmStats


def test_arm_selector_settles_on_the_cheaper_arm_and_retries_the_other():
    sel = ArmSelector(2, epoch_steps=4, retry_after=5)
    tokens_per_cost = {0: 1.0, 1: 1.5}  # arm 1 is better
    pulls = []
    for _ in range(400):
        arm = sel.choose()
        pulls.append(arm)
        sel.update(tokens=tokens_per_cost[arm], cost=1.0)
    assert pulls[:4] == [0] * 4 and pulls[4:8] == [1] * 4  # both tried first
    assert pulls[200:].count(1) > 0.75 * 200  # mostly the better arm
    assert pulls[8:].count(0) >= 2 * 4  # ... but the other is retried


def test_a_new_request_starts_on_the_arm_its_drafter_learnt_and_exploration_is_paced_over_requests():
    shared = ArmStats(2, retry_after=4)
    value = {0: 1.0, 1: 1.5}  # arm 1 is better
    first = ArmSelector(2, epoch_steps=3, shared=shared)
    pulls = []
    for _ in range(6):
        pulls.append(first.choose())
        first.update(value[pulls[-1]], 1.0)
    assert pulls == [0] * 3 + [1] * 3  # the first request explores both
    # the next starts on the winner
    assert ArmSelector(2, epoch_steps=3, shared=shared).choose() == 1
    pulls = []
    for _ in range(40):  # short requests: 3 epochs each
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
        sel.update(1.0, 1.0, base=(1.0, 1.0))  # arm 0 is the reference: scores 1
    assert sel.choose() == 1
    for _ in range(2):
        sel.update(3.0, 1.5, base=(2.5, 1.0))  # raw 2.0 tokens/cost, but 0.8x the reference's
    assert sel.shared.value == pytest.approx([1.0, 0.8])
    assert sel.choose() == 0


def test_a_supposed_arm_waits_as_a_loser_and_its_first_real_epoch_replaces_the_prior():
    shared = ArmStats(2, retry_after=4)
    shared.suppose(1, 0.7)  # far behind arm 0's expected 1.0
    sel = ArmSelector(2, epoch_steps=2, shared=shared)
    pulls = []
    for _ in range(2 * 24):
        pulls.append(sel.choose())
        sel.update(1.0 if pulls[-1] == 0 else 1.3, 1.0)
    assert pulls.index(1) >= 2 * 4 * 4  # not explored first: waited 4x retry_after epochs
    assert shared.value[1] == pytest.approx(1.3)  # evidence replaced the prior (no blend with 0.7)
    shared.suppose(1, 0.1)  # evidence exists: a prior no longer applies
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
