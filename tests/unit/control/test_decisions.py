"""Decisions the simulator's shoal policy makes and the live controller will: tier, batch, cost."""

import pytest

from shoal.control.batch import best_batch, nodes_needed, unit_goodput
from shoal.control.tiers import marginal_price, marginal_tier, tier_order
from shoal.perf.cost import price_per_hour, price_per_step
from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import load_profile


def test_elastic_jobs_take_spot_first_and_gangs_on_demand_first():
    assert tier_order(elastic=True) == ("spot", "on_demand")
    assert tier_order(elastic=False) == ("on_demand", "spot")
    assert marginal_tier(2) == "spot" and marginal_tier(0) == "on_demand"
    assert marginal_price("t4", 1) == 0.11 and marginal_price("t4", 0) == 0.35


def test_placement_price_per_hour_and_per_step():
    assert price_per_hour({"t4": 2, "v100": 1}) == pytest.approx(2 * 0.35 + 2.144)
    assert price_per_hour({"t4": 2, "v100": 1}, {"t4": "spot", "v100": "on_demand"}) == (
        pytest.approx(2 * 0.11 + 2.144)
    )
    assert price_per_step({"t4": 4}, 1.8, "spot") == pytest.approx(4 * 0.11 * 1.8 / 3600)


def test_best_batch_is_no_worse_than_the_initial_batch():
    m0 = load_profile("cifar10").init_batch_size
    assert nodes_needed({"t4": 5, "v100": 0}, {"t4": 4, "v100": 8}) == 2
    batch, rate = best_batch("cifar10", {"t4": 8}, 2, 0.0)
    at_m0 = goodput_model("cifar10").progress_rate((("t4", 8),), 2, m0, 0.0)
    assert batch > m0 and rate > at_m0
    assert unit_goodput("cifar10", 0.0) == best_batch("cifar10", {"t4": 1}, 1, 0.0)[1]
    assert best_batch("cifar10", {}, 0, 0.0) == (None, 0.0)
