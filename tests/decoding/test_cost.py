"""The forward-cost model drafters price their rows with."""
import pytest

import math

from paraspec.decoding.cost import NEAR, PRIOR_SAMPLES, REFRESH, CostModel, PairedTimes, monotone, window_prior


def test_cost_model_interpolates_and_extrapolates_monotonically():
    c = CostModel({1: 1.0, 8: 1.0, 16: 1.2, 32: 1.8})
    assert c(1) == c(4) == 1.0
    assert c(16) == pytest.approx(1.2) and c(24) == pytest.approx(1.5)
    assert c(48) == pytest.approx(1.8 + 0.6 / 16 * 16)
    assert all(c(k) <= c(k + 1) for k in range(1, 200))


def test_cost_model_free_rows_reads_the_staircase():
    c = CostModel({k: 1.0 + 0.3 * ((k - 1) // 4) for k in range(1, 65)})   # stairs of 4 rows
    assert [c.free_rows(r) for r in (1, 2, 4, 5, 7, 8)] == [3, 2, 0, 3, 1, 0]


def test_window_prior_is_below_one_where_the_windows_rows_are_dear():
    steep = CostModel({4: 1.0, 8: 1.25, 12: 1.4, 16: 1.55, 20: 1.75, 24: 1.95, 32: 2.4})
    flat = CostModel({4: 1.0, 8: 1.0, 16: 1.02, 32: 1.05})
    assert window_prior(steep, 14) < 0.8 < 1.0 < window_prior(flat, 14)


def test_monotone_fit_averages_a_noisy_spike_instead_of_carrying_it_forward():
    assert list(monotone([1.0, 1.3, 1.7, 2.4])) == [1.0, 1.3, 1.7, 2.4]        # already monotone: unchanged
    fit = monotone([1.0, 1.3, 2.6, 1.8, 2.2, 3.0])    # one slow round at the third size
    assert list(fit) == pytest.approx([1.0, 1.3, 2.2, 2.2, 2.2, 3.0])
    assert all(a <= b for a, b in zip(fit, fit[1:]))
    c = CostModel({1: 1.0, 4: 1.3, 8: 2.6, 12: 1.8, 16: 2.2, 32: 3.0})
    assert c(12) == pytest.approx(2.2) and c(16) == pytest.approx(2.2)       # a running max said 2.6


BASE = {1: 1.0, 4: 1.5, 8: 2.0, 16: 3.0, 32: 5.0, 64: 9.0}


def test_paired_times_scale_a_band_by_what_steps_at_equal_cache_length_measured():
    """8-row steps take 3x a one-row step of the same sequence nearby; the curve said 2x."""
    times, curve, ctx = PairedTimes(BASE), None, 100
    for i in range(REFRESH):
        times.step("a", 1, 0.010, ctx)          # two one-row steps: the second is the reference
        times.step("a", 1, 0.010, ctx + 1)
        curve = times.step("a", 8, 0.030, ctx + 2) or curve
        ctx += 3
    assert curve is not None
    overall = REFRESH * math.log(1.5) / (REFRESH + PRIOR_SAMPLES)
    assert curve[8] == pytest.approx(2.0 * math.exp((REFRESH * math.log(1.5) + PRIOR_SAMPLES * overall)
                                                    / (REFRESH + PRIOR_SAMPLES)))
    # bands without steps of their own follow the others part way; one row stays one row
    assert curve[4] == pytest.approx(1.5 * math.exp(overall)) and curve[16] == pytest.approx(3.0 * math.exp(overall))
    assert curve[1] == 1.0


def test_paired_times_skip_far_references_other_sequences_and_steps_after_wide_ones():
    times = PairedTimes(BASE)
    times.step("a", 1, 0.010, 100)
    times.step("a", 1, 0.010, 101)
    times.step("b", 8, 0.050, 102)                        # another sequence: no reference
    times.step("a", 8, 0.050, 101 + NEAR + 1)             # too far from a's one-row step
    times.step("a", 1, 0.020, 300)                        # right after a wide step: not a reference
    times.step("a", 8, 0.050, 301)
    assert times._n == [0] * len(times._n)
    times.step("a", 1, 0.010, 302)                        # after a wide step: not a reference
    times.step("a", 1, 0.010, 303)
    times.step("a", 8, 0.030, 304)
    assert times._n[2] == 1
