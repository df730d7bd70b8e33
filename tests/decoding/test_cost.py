"""The forward-cost model drafters price their rows with."""
import pytest

from paraspec.decoding.cost import CostModel, monotone, window_prior, StepTimes


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


CURVE = {k: 1.0 + 0.1 * (k - 1) for k in range(1, 65)}     # start-up: 16 rows cost 2.5 rows... 2.5x one


def test_step_times_correct_the_curve_where_steps_were_timed():
    times = StepTimes()
    assert times.corrected(CURVE) is None                   # nothing timed yet
    for _ in range(40):
        times.record(1, 0.010)
        times.record(8, 0.030)                              # 3.0x one row, where start-up said 1.7
    got = times.corrected(CURVE)
    w = 40 / (40 + StepTimes.PRIOR_STEPS)
    assert got[1] == pytest.approx(1.0)
    assert got[8] == pytest.approx(w * 3.0 + (1 - w) * 1.7)
    assert got[7] == pytest.approx(CURVE[7] * got[8] / CURVE[8])      # 5-8 rows: one bucket
    assert got[3] == pytest.approx(CURVE[3] * (1 + (got[8] / CURVE[8] - 1) * 2 / 7))  # between 1 and 8
    assert got[64] == pytest.approx(CURVE[64] * got[8] / CURVE[8])   # past the last: its factor
    assert CostModel(got)(8) > CostModel(CURVE)(8)


def test_step_times_scale_from_the_most_timed_bucket_and_ignore_stalls():
    times = StepTimes()
    for i in range(30):
        times.record(4, 0.020)
        times.record(16, 0.060 if i != 10 else 5.0)         # one stall of the machine, clipped
    for _ in range(10):
        times.record(2, 0.015)
    got = times.corrected(CURVE)
    assert got[4] == pytest.approx(CURVE[4])                # no one-row steps: 4 rows anchor
    assert 3.0 * CURVE[4] * 0.9 < got[16] < 3.0 * CURVE[4] * 1.2
    assert got[1] == pytest.approx(CURVE[1] * got[2] / CURVE[2])     # below the first: its factor


def test_step_times_need_two_buckets_with_enough_steps():
    times = StepTimes()
    for _ in range(100):
        times.record(1, 0.01)
    for _ in range(StepTimes.MIN_STEPS - 1):
        times.record(12, 0.05)
    assert times.corrected(CURVE) is None
    times.record(12, 0.05)
    assert times.corrected(CURVE) is not None
