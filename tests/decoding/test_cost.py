"""The forward-cost model drafters price their rows with."""

import pytest

from paraspec.decoding.policy.cost import CostModel, monotone, window_prior


def test_cost_model_interpolates_and_extrapolates_monotonically():
    c = CostModel({1: 1.0, 8: 1.0, 16: 1.2, 32: 1.8})
    assert c(1) == c(4) == 1.0
    assert c(16) == pytest.approx(1.2) and c(24) == pytest.approx(1.5)
    assert c(48) == pytest.approx(1.8 + 0.6 / 16 * 16)
    assert all(c(k) <= c(k + 1) for k in range(1, 200))


def test_cost_model_free_rows_reads_the_staircase():
    c = CostModel({k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)})  # stairs of 4 rows
    assert [c.free_rows(r) for r in (1, 2, 4, 5, 7, 8)] == [3, 2, 0, 3, 1, 0]


def test_window_prior_is_below_one_where_the_windows_rows_are_dear():
    steep = CostModel({4: 1.0, 8: 1.25, 12: 1.4, 16: 1.55, 20: 1.75, 24: 1.95, 32: 2.4})
    flat = CostModel({4: 1.0, 8: 1.0, 16: 1.02, 32: 1.05})
    assert window_prior(steep, 14) < 0.8 < 1.0 < window_prior(flat, 14)


def test_monotone_fit_averages_a_noisy_spike_instead_of_carrying_it_forward():
    # already monotone: unchanged
    assert list(monotone([1.0, 1.3, 1.7, 2.4])) == [
        1.0,
        1.3,
        1.7,
        2.4,
    ]
    fit = monotone([1.0, 1.3, 2.6, 1.8, 2.2, 3.0])  # one slow round at the third size
    assert list(fit) == pytest.approx([1.0, 1.3, 2.2, 2.2, 2.2, 3.0])
    assert all(a <= b for a, b in zip(fit, fit[1:]))
    c = CostModel({1: 1.0, 4: 1.3, 8: 2.6, 12: 1.8, 16: 2.2, 32: 3.0})
    assert c(12) == pytest.approx(2.2) and c(16) == pytest.approx(2.2)  # a running max said 2.6


# ------------------------------------------------------------------------------ plausible_curve
from hypothesis import given, settings, strategies as st  # noqa: E402

from paraspec.decoding.policy.cost import plausible_curve  # noqa: E402

# a quiet real Zen 1 (issue 37)
ZEN1 = {
    1: 1.0,
    2: 2.08,
    4: 3.04,
    8: 6.08,
    12: 7.95,
    16: 11.16,
    32: 20.26,
}


def physical(curve: dict[int, float]) -> bool:
    """1 <= t(k) <= k, monotone, and no forward dearer than two that make up its rows."""
    ks = sorted(curve)
    return (
        curve[1] == 1.0
        and all(1.0 <= curve[k] <= k + 1e-9 for k in ks)
        and all(curve[a] <= curve[b] + 1e-9 for a, b in zip(ks, ks[1:]))
        and all(
            curve[a + b] <= curve[a] + curve[b] + 1e-9 for a in ks for b in ks if a + b in curve
        )
    )


def test_a_probe_disturbed_by_other_work_is_given_a_plausible_shape():
    # read on a 2-core machine while a compiler ran on the other core: 8 and 16 rows far dearer
    # than 4 rows' reading allows (t(16) 14.8 > two forwards of 8, 10.4)
    shaped = plausible_curve({1: 1.0, 4: 2.22, 8: 5.20, 16: 14.8})
    assert physical(shaped.curve)
    assert 16 in shaped.replaced and 4 not in shaped.replaced
    assert shaped.curve[4] == pytest.approx(2.22)
    assert shaped.curve[16] <= 2 * shaped.curve[8] and shaped.curve[16] < 0.6 * 14.8


def test_a_probe_that_read_rows_free_past_four_is_not_believed_either():
    # the other probe of the same run: 16 rows as cheap as 4 where 4 cost 3.2 steps
    shaped = plausible_curve({1: 1.0, 4: 3.19, 16: 3.19})
    assert shaped.replaced == (16,) and physical(shaped.curve)
    assert shaped.curve[16] > 2 * shaped.curve[4]  # the 4-row point's level, the prior's shape


def test_a_plausible_probe_keeps_its_readings():
    shaped = plausible_curve(ZEN1)  # dear rows, but a real machine's: kept, only bounded
    assert shaped.replaced == () and physical(shaped.curve)
    assert shaped.curve[2] == 2.0  # no more than two rows
    for k in (4, 8, 12, 32):
        assert shaped.curve[k] == pytest.approx(ZEN1[k])
    # 11.16 > a 4-row + a 12-row forward
    assert shaped.curve[16] == pytest.approx(ZEN1[4] + ZEN1[12])
    flat = plausible_curve({1: 1.0, 4: 1.0, 8: 1.0, 16: 1.17, 32: 1.71, 64: 2.82}, multiple=4)
    assert flat.replaced == () and flat.curve[3] == flat.curve[4] == 1.0
    # padded: a staircase
    assert flat.curve[16] == pytest.approx(1.17) and flat.curve[13] == flat.curve[16]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.2, 40.0), min_size=3, max_size=8), st.sampled_from([1, 4]))
def test_any_probe_comes_out_physical(readings, multiple):
    sizes = (
        [1, 2, 4, 8, 12, 16, 24, 32][: len(readings)]
        if multiple == 1
        else [4, 8, 12, 16, 24, 32, 48, 64][: len(readings)]
    )
    measured = (
        {1: 1.0, **dict(zip(sizes, readings))} if multiple == 1 else dict(zip(sizes, readings))
    )
    measured[sizes[0]] = 1.0
    shaped = plausible_curve(measured, multiple)
    curve = shaped.curve
    assert sorted(curve) == list(range(1, max(sizes) + 1))
    # k rows run padded to a multiple
    assert all(1.0 <= curve[k] <= -(-k // multiple) + 1e-9 for k in curve)
    assert all(curve[k] <= curve[k + 1] + 1e-9 for k in range(1, max(sizes)))
    runs = [k for k in curve if k % multiple == 0]
    assert all(
        curve[a + b] <= curve[a] + curve[b] + 1e-9 for a in runs for b in runs if a + b in curve
    )
