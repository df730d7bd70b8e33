"""The forward-cost model drafters price their rows with."""
import pytest

from paraspec.decoding.cost import CostModel, monotone, window_prior


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
