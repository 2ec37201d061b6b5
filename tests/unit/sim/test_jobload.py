"""The job-load workloads (`pollux:N:LOAD`) and Optimus's oracle."""

import pytest

from shoal.errors import UserError
from shoal.perf.goodput import goodput_model
from shoal.sim.workloads import load_workload


@pytest.mark.parametrize("load,jobs", [("0.5", 80), ("1.0", 160), ("1.5", 240), ("2.0", 320)])
def test_pollux_loads_hold_more_jobs_in_the_same_window(load, jobs):
    workload = load_workload(f"pollux:6:{load}")
    assert len(workload) == jobs
    assert max(j.arrival_s for j in workload) < 8 * 3600


def test_default_load_is_one():
    assert [j.name for j in load_workload("pollux:6")] == [
        j.name for j in load_workload("pollux:6:1.0")
    ]


@pytest.mark.parametrize("spec", ["pollux:6:3.0", "pollux:9:1.0", "pollux:6:1.0:x"])
def test_bad_pollux_spec_is_a_user_error(spec):
    with pytest.raises(UserError):
        load_workload(spec)


def test_oracle_remaining_steps_match_the_model():
    # from the start at a fixed batch, the oracle's steps equal the simulator's time / step time
    app, batch = "cifar10", 2048
    model = goodput_model(app)
    counts = (("t4", 4),)
    total = model.profile.total_progress
    rate = model.segment_rate(counts, 1, batch, 0.0, total)
    steps = total / rate / model.step_time_s(counts, 1, batch)
    assert model.steps_between(batch, 0.0, total) == pytest.approx(steps, rel=1e-3)
    assert model.steps_between(batch, total, total) == 0.0
    half, quarter = (model.steps_between(batch, total / k, total) for k in (2, 4))
    assert half < quarter


@pytest.mark.parametrize("app", ["cifar10", "yolov3", "bert"])
def test_oracle_counts_to_the_jobs_own_end(app):
    # a trace's job ends where its steps take it, not at the curve's end: the steps left from
    # any point are those to its own end, and add up across a split
    model = goodput_model(app)
    batch = model.profile.init_batch_size * 4
    for steps in (50.0, 3_000.0, 10**6):
        end = model.progress_after(batch, steps)
        assert model.steps_between(batch, 0.0, end) == pytest.approx(steps, rel=1e-9)
        mid = end / 3
        split = model.steps_between(batch, 0.0, mid) + model.steps_between(batch, mid, end)
        assert split == pytest.approx(steps, rel=2e-3)
