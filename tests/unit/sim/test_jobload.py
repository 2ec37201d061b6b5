"""The job-load workloads (`pollux:N:LOAD`) and Optimus's oracle."""

import pytest

from shoal.errors import UserError
from shoal.perf.goodput import goodput_model
from shoal.sim.policies.optimus import remaining_steps
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
    assert remaining_steps(app, batch, 0.0) == pytest.approx(steps, rel=0.02)
    assert remaining_steps(app, batch, total) == pytest.approx(0.0, abs=1e-9)
    assert remaining_steps(app, batch, total / 2) < remaining_steps(app, batch, total / 4)
