"""CurveRefresh: the probe corrected by the engine's own steps, a k-row step against one-row steps
of the same sequence at (nearly) the same cache length. Synthetic step times, no clock."""

import pytest

from paraspec.decoding.policy.cost import plausible_curve
from paraspec.decoding.policy.cost import NEAR, ONE_ROW_KEPT, PENDING, REFRESH, WINDOW, CurveRefresh

PROBE = plausible_curve({1: 1.0, 2: 1.3, 4: 1.75, 8: 2.7, 16: 4.0, 32: 7.5}).curve
SIZES = (1, 2, 4, 8, 16, 32)
TRUE = {1: 1.0, 2: 1.6, 4: 2.4, 8: 4.0, 16: 6.5, 32: 12.0}  # rows dearer than the probe read


def seconds(rows: int, length: int) -> float:
    """A step's time: the true curve, times a cache term that grows with the context."""
    return 0.01 * TRUE[rows] * (1.0 + length / 200)


def test_pairs_at_equal_context_correct_the_probe():
    r = CurveRefresh(PROBE, SIZES)
    length = 100
    for i in range(80):  # a one-row step, two more, then a 16-row one, and so on
        for _ in range(3):
            r.step("a", 1, length, seconds(1, length))
            length += 1
        r.step("a", 16, length, seconds(16, length))
        length += 16
    assert r.samples == 80 and r.refreshes == 80 // REFRESH
    # the band's median ratio is the true one; shrunk toward the probe by its pseudo-samples
    assert PROBE[16] < r.curve[16] < TRUE[16] * 1.01 and r.curve[16] > PROBE[16] + 0.8 * (
        TRUE[16] - PROBE[16]
    )
    assert all(r.curve[k] <= r.curve[k + 1] for k in range(1, 32))


def test_steps_at_other_contexts_are_not_paired():
    """One-row steps on a short cache, k-row steps on a long one: their ratio would price the
    cache's growth as the rows' cost (design-notes' first try). Nothing is sampled."""
    r = CurveRefresh(PROBE, SIZES)
    for i in range(40):
        r.step("a", 1, 50 + i, seconds(1, 50 + i))
    for i in range(40):  # the same sequence, NEAR+ tokens on, rows only
        r.step("a", 8, 200 + 8 * i, seconds(8, 200 + 8 * i))
    r.step("a", 1, 200 + 8 * 40 + NEAR + 1, seconds(1, 520 + NEAR))  # past the pending steps' reach
    r.step("b", 8, 60, seconds(8, 60))  # another sequence's k rows at a length "a" had: not a pair
    assert r.samples == 0 and r.curve == PROBE


def test_a_k_row_step_is_paired_with_the_first_one_row_step_after_it():
    r = CurveRefresh(PROBE, SIZES)
    r.step("a", 8, 300, seconds(8, 300))  # no one-row step before it
    r.step("a", 1, 309, seconds(1, 309))  # right after a wide step: not a one-row sample
    r.step("a", 1, 310, seconds(1, 310))
    assert r.samples == 1


def test_memory_is_bounded_and_forgotten():
    r = CurveRefresh(PROBE, SIZES)
    for seq in range(50):
        for i in range(200):
            rows = 1 if i % 3 == 0 else 4
            r.step(seq, rows, 10 + 5 * i, seconds(rows, 10 + 5 * i))
        st = r._seqs[seq]
        assert len(st.one) <= ONE_ROW_KEPT and len(st.pending) <= PENDING
        r.forget(seq)
    assert not r._seqs
    assert r.samples > WINDOW and all(len(b) <= WINDOW for b in r._bands)


def test_a_pinned_curve_is_kept_as_it_is():
    r = CurveRefresh(PROBE, SIZES, pinned=True)
    for i in range(50):
        assert r.step("a", 1, i, seconds(1, i)) is None
        assert r.step("a", 16, i, seconds(16, i)) is None
    assert r.samples == 0 and r.curve == PROBE and r.info()["pinned"]


def test_padded_rows_keep_their_unit():
    """Rows padded to 4: up to 4 rows is the unit (what one row runs as); a refresh keeps it so."""
    probe = plausible_curve({4: 1.0, 8: 1.0, 16: 1.17, 32: 1.71}, multiple=4).curve
    r = CurveRefresh(probe, (4, 8, 16, 32), multiple=4)
    for i in range(3 * REFRESH):
        r.step("a", 1, 100 + 20 * i, 0.01)  # right after a wide step: not a sample
        r.step("a", 3, 101 + 20 * i, 0.01)  # the one-row forward's padded shape: the unit
        r.step("a", 16, 104 + 20 * i, 0.0125)
    assert r.samples == 3 * REFRESH
    assert r.curve[1] == r.curve[4] == 1.0 and r.curve[16] == pytest.approx(
        1.17 * (1.25 / 1.17) ** (24 / 32), rel=0.02
    )
    info = r.info()
    assert info["t_k_over_t_1"][16] == round(r.curve[16], 3) and info["samples"] == 3 * REFRESH
