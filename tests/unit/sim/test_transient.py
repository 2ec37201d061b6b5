"""Acceptance: the transient-server paper (ICAC'19), replayed from its measured inputs.

Inputs: the single on-demand K80 step rate (64,000 steps / mean of its 10 runs, 4.545 steps/s)
and the measured preemptible-K80 lifetimes (64 VMs). Targets, the paper's mean +- 1 sd over its
runs per size, unrounded from its `agg_data.csv` tables (paper, rounded: 2 K80 2.16 h +- 0.50,
$1.31 +- 0.08; 4 K80 1.05 h +- 0.17, $1.16 +- 0.04; 8 K80 0.51 h +- 0.01, $1.11 +- 0.02); the
2-K80 cost is the paper's revocation-aware $1.313 +- 0.083 (its CSV bills revoked workers in
full); revoked K80 servers 28 of 448.
Tolerance: our mean over 600 seeded runs per size must fall inside the paper's mean +- 1 sd (the
standard error of our mean is < 0.02 h and < $0.003); the pooled revoked fraction over the same
2/4/8 mix must be within one binomial standard deviation of 28/448 (sqrt(p(1-p)/448) = 0.0114).
Known miss, kept visible: with perfect async scaling (efficiency 1) the 8-K80 cost falls below
the paper's band ($1.07 vs $1.092..$1.137); with the per-worker efficiency measured by the paper's
separate on-demand runs of the same size, every target holds.
These cover the uniform-rate replay (`TransientConfig`), unchanged by issue 16; the same targets
with step rates from the fitted parameter-server model, where the 8-K80 cost holds without the
on-demand efficiency, are in test_transient_model.py.
"""

import math

import pytest

from shoal.sim.transient import (
    TransientConfig,
    on_demand_efficiency,
    replicate,
    single_gpu_step_rate,
)

PAPER = {
    2: (2.1568, 0.4994, 1.313, 0.083),
    4: (1.0458, 0.1667, 1.1567, 0.0369),
    8: (0.5112, 0.0144, 1.1145, 0.0222),
}
RUNS = 600


def _within(value, mean, sd):
    return mean - sd <= value <= mean + sd


def test_step_rate_input():
    assert single_gpu_step_rate() == pytest.approx(64000 / 14081.0, rel=1e-3)


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_time_and_cost_with_measured_scaling(workers):
    cfg = TransientConfig(workers, single_gpu_step_rate(), on_demand_efficiency(workers))
    s = replicate(cfg, RUNS, seed=11)
    hours, hours_sd, cost, cost_sd = PAPER[workers]
    assert _within(s.mean_hours, hours, hours_sd), (workers, s.mean_hours)
    assert _within(s.mean_cost_usd, cost, cost_sd), (workers, s.mean_cost_usd)


@pytest.mark.parametrize("workers", [2, 4])
def test_time_and_cost_from_single_gpu_rate_only(workers):
    s = replicate(TransientConfig(workers, single_gpu_step_rate()), RUNS, seed=12)
    hours, hours_sd, cost, cost_sd = PAPER[workers]
    assert _within(s.mean_hours, hours, hours_sd)
    assert _within(s.mean_cost_usd, cost, cost_sd)


def test_eight_workers_from_single_gpu_rate_only_time_holds_cost_misses():
    s = replicate(TransientConfig(8, single_gpu_step_rate()), RUNS, seed=13)
    hours, hours_sd, cost, cost_sd = PAPER[8]
    assert _within(s.mean_hours, hours, hours_sd)
    assert s.mean_cost_usd < cost - cost_sd  # the documented miss; fails if the model changes


def test_revoked_fraction_matches_28_of_448():
    rate = single_gpu_step_rate()
    # the paper's mix: 32 runs each of 2, 4 and 8 workers = 448 servers; we run 20 such mixes
    revoked = servers = 0
    for workers in (2, 4, 8):
        s = replicate(TransientConfig(workers, rate), 32 * 20, seed=14)
        revoked += s.revoked
        servers += s.servers
    p = 28 / 448
    assert abs(revoked / servers - p) <= math.sqrt(p * (1 - p) / 448)
