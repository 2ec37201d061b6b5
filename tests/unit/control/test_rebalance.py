"""The live controller's planner: the shared step-time model fitted online, keyed by worker id."""

import json

import pytest

from shoal.control import Rebalancer


def _two(window=5, stale_after=20, replan_every=2, caps=(None, None)):
    reb = Rebalancer(8, replan_every, window=window, stale_after=stale_after)
    reb.regroup(["a", "b"], [1.0, 1.0], list(caps))
    return reb


def test_starts_as_a_group_of_one():
    assert Rebalancer(6).plan.counts == (6,)


def test_replanning_follows_measured_speed():
    reb = _two(window=1)
    assert reb.plan.counts == (4, 4)
    assert reb.after_step(0, [0.05, 0.01]).counts == (4, 4)  # warm-up: not learned from
    plan = reb.after_step(1, [0.01, 0.03])  # worker b turns out 3x slower
    assert plan.counts == (6, 2)
    assert reb.after_step(3, [None, None]).counts == (6, 2)  # no measurement: estimates kept


def test_replans_only_every_replan_every_steps():
    reb = _two(window=1, replan_every=3)
    reb.after_step(0, [None, None])  # warm-up
    assert reb.after_step(1, [0.01, 0.03]).counts == (4, 4)  # (1 + 1) % 3 != 0
    assert reb.after_step(2, [0.01, 0.03]).counts == (6, 2)


def test_by_default_one_idle_step_does_not_forget_a_measurement():
    reb = Rebalancer(4, 1)  # the runtime's window and stale_after
    reb.regroup(["a", "b"], [1.0, 1.0], [None, None])
    reb.after_step(0, [None, None])  # warm-up
    assert reb.after_step(1, [0.01, 1.0]).counts == (4, 0)
    assert reb.after_step(2, [0.01, None]).counts == (4, 0)


def test_an_idle_worker_is_probed_again():
    reb = Rebalancer(4, 1, window=1, stale_after=3)
    reb.regroup(["a", "b"], [1.0, 1.0], [None, None])
    reb.after_step(0, [None, None])  # warm-up
    assert reb.after_step(1, [0.01, 1.0]).counts == (4, 0)  # a slow spell on worker b
    for step in (2, 3):
        assert reb.after_step(step, [0.01, None]).counts == (4, 0)
    assert reb.after_step(4, [0.01, None]).counts == (2, 2)  # forgotten: probed again


def test_measurements_survive_a_regroup_and_newcomers_scale_from_priors():
    reb = _two(window=1, replan_every=1)
    reb.after_step(0, [None, None])
    reb.after_step(1, [0.01, 0.03])
    # b leaves, c (prior 2x a's) joins; a keeps its measurement, c is estimated at 0.02
    reb.regroup(["a", "c"], [1.0, 2.0], [None, None])
    assert reb.fit.estimates_s(["a", "c"], [1.0, 2.0]) == pytest.approx([0.01, 0.02])
    assert reb.plan.counts == (6, 2)  # times 0.01 and 0.02: makespan 0.06
    assert reb.after_step(2, [9.0, 9.0]).counts == (6, 2)  # the first step after it is warm-up


def test_caps_bound_a_worker():
    reb = _two(caps=(2, None))
    assert reb.plan.counts == (2, 6)


def test_bad_arguments():
    with pytest.raises(ValueError):
        Rebalancer(4, 0)
    with pytest.raises(ValueError):
        Rebalancer(4).regroup(["a"], [1.0, 2.0], [None])
    reb = _two()
    reb.after_step(0, [None, None])  # warm-up
    with pytest.raises(ValueError):  # one time per rank, not silently truncated
        reb.after_step(1, [0.01])


def test_a_newcomer_that_adopts_the_groups_measurements_plans_the_same_split():
    # the runtime sends one member's state to the others at a regroup: a fresh planner (a
    # newcomer) that loads it must plan exactly as the member that measured
    old = _two(window=3, replan_every=1)
    old.after_step(0, [None, None])
    old.after_step(1, [0.01, 0.01])  # b is as fast as a, though its prior says 3x slower
    old.after_step(2, [0.012, None])
    fresh = Rebalancer(8, 1, window=3)
    fresh.load_state_dict(json.loads(json.dumps(old.state_dict())))  # as it travels
    for reb in (old, fresh):
        reb.regroup(["a", "b", "c"], [1.0, 3.0, 2.0], [None, None, None])
    assert fresh.plan == old.plan
    before = Rebalancer(8, 1, window=3)
    before.regroup(["a", "b", "c"], [1.0, 3.0, 2.0], [None, None, None])
    assert before.plan != old.plan  # without the measurements the newcomer would disagree
