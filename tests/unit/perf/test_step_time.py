"""The step-time model: one split, a makespan plus sync, fitted online or evaluated from speeds."""

import pytest

from shoal.perf.step_time import (
    SpeedFit,
    estimate_seconds,
    split,
    step_seconds,
    units_speed,
)


def test_unmeasured_workers_are_scaled_from_their_prior():
    assert estimate_seconds([0.02, None], [1.0, 3.0]) == [0.02, 0.06]
    assert estimate_seconds([None, None], [1.0, 3.0]) == [1.0, 3.0]
    # the scale is the mean of measured / prior: (0.04 / 2 + 0.03 / 1) / 2 = 0.025
    assert estimate_seconds([0.04, None, 0.03], [2.0, 3.0, 1.0]) == pytest.approx(
        [0.04, 0.075, 0.03]
    )


def test_step_time_is_the_makespan_plus_sync():
    plan = split(5, [1.0, 2.0])
    assert plan.counts == (4, 1)  # makespan 4; ties go to the lower rank
    assert step_seconds(plan, [1.0, 2.0], sync_s=0.5) == pytest.approx(4.5)


def test_units_speed_is_the_best_integer_split():
    assert units_speed(4, [1.0, 1.0, 1.0, 1.0]) == pytest.approx(4.0)
    # 3 units on 2 equal GPUs: one GPU does 2 units, so the job runs at 1.5 GPUs
    assert units_speed(3, [1.0, 1.0]) == pytest.approx(1.5)
    # a 2x GPU takes 2 of 3 units: perfect balance
    assert units_speed(3, [2.0, 1.0]) == pytest.approx(3.0)


def test_one_slow_step_does_not_move_the_fit():
    fit = SpeedFit(window=5)
    for t in (0.010, 0.011, 0.010, 0.050, 0.010):
        fit.observe("a", t)
    assert fit.estimates_s(["a"], [1.0]) == [0.010]


def test_fit_forgets_a_stale_worker_and_workers_that_left():
    fit = SpeedFit(window=1, stale_after=2)
    fit.observe("a", 0.5)
    fit.observe("b", 0.1)
    fit.observe_idle("a")
    assert fit.measured_s("a") == 0.5
    fit.observe_idle("a")
    assert fit.measured_s("a") is None
    fit.keep_only(["a"])
    assert fit.measured_s("b") is None


def test_bad_observations_are_ignored_and_window_checked():
    fit = SpeedFit()
    fit.observe("a", float("nan"))
    fit.observe("a", 0.0)
    assert fit.measured_s("a") is None
    with pytest.raises(ValueError):
        SpeedFit(window=0)
