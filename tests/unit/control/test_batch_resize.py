"""The runtime's side of the batch policies in the planner: a new M re-plans with the fitted
speeds kept, and the throughput model is a pure function of the reference priors."""

import pytest

from shoal.control import Rebalancer


def test_resize_replans_and_keeps_measurements():
    reb = Rebalancer(6, replan_every=1)
    reb.regroup(["a", "b"], [1.0, 1.0], [None, None])
    for step in range(1, 4):  # the first step after a regroup is not learned from
        reb.after_step(step, [1.0, 2.0])  # b measures twice as slow
    assert reb.plan.counts == (4, 2)
    history = reb.state_dict()
    plan = reb.resize(12)
    assert plan is reb.plan and plan.counts == (8, 4) and reb.num_micro_batches == 12
    assert reb.state_dict() == history
    with pytest.raises(ValueError):
        reb.resize(0)
    assert reb.resize(1).counts == (1, 0)  # a batch of one micro-batch: the faster worker's


def test_throughput_model_from_priors_is_layout_free():
    a, b = Rebalancer(4), Rebalancer(4)
    b.regroup(["x", "y", "z"], [5.0, 5.0, 5.0], [2, 2, 2])
    for step in range(1, 4):
        b.after_step(step, [0.1, 0.2, 0.3])
    # two workers at 1 s and 2 s per micro-batch, b = 4 samples
    model_a = a.throughput_model(4, [1.0, 2.0])
    model_b = b.throughput_model(4, [1.0, 2.0])
    # B = 12: M = 3 -> split (2, 1): makespan 2 s -> 6 samples/s
    assert model_a(12) == model_b(12) == pytest.approx(6.0)
    # B = 8: M = 2 -> (2, 0) or (1, 1): makespan 2 s -> 4 samples/s; B = 10 rounds up to M = 3
    assert model_a(8) == pytest.approx(4.0) and model_a(10) == model_a(12)
    # B = 4 and below (one micro-batch, or a partial one): the faster worker's 1 s
    assert model_a(4) == model_a(1) == pytest.approx(4.0)
    # a per-step overhead of 1 s: B = 12 takes 3 s, B = 4 (one micro-batch) 2 s
    with_overhead = a.throughput_model(4, [1.0, 2.0], step_overhead_s=1.0)
    assert with_overhead(12) == pytest.approx(4.0) and with_overhead(4) == pytest.approx(2.0)
