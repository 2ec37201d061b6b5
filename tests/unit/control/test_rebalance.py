from shoal.control import Rebalancer, SpeedEstimator


def test_unmeasured_workers_are_scaled_from_their_prior():
    est = SpeedEstimator([1.0, 3.0])
    est.observe(0, 0.02)
    assert est.estimates_s() == [0.02, 0.06]


def test_replanning_follows_measured_speed():
    reb = Rebalancer(8, SpeedEstimator([1.0, 1.0], window=1), replan_every=2)
    assert reb.plan.counts == (4, 4)
    assert reb.after_step(0, [0.05, 0.01]).counts == (4, 4)  # warm-up: not learned from
    plan = reb.after_step(1, [0.01, 0.03])  # worker 1 turns out 3x slower
    assert plan.counts == (6, 2)
    assert reb.after_step(3, [None, None]).counts == (6, 2)  # no measurement: estimates kept


def test_an_idle_worker_is_probed_again():
    est = SpeedEstimator([1.0, 1.0], window=1, stale_after=3)
    reb = Rebalancer(4, est, replan_every=1, warmup_steps=0)
    assert reb.after_step(0, [0.01, 1.0]).counts == (4, 0)  # a slow spell on worker 1
    for step in (1, 2):
        assert reb.after_step(step, [0.01, None]).counts == (4, 0)
    assert reb.after_step(3, [0.01, None]).counts == (2, 2)  # forgotten: probed again


def test_one_slow_step_does_not_move_the_estimate():
    est = SpeedEstimator([1.0], window=5)
    for t in (0.010, 0.011, 0.010, 0.050, 0.010):
        est.observe(0, t)
    assert est.estimates_s() == [0.010]
