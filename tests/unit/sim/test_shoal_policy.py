"""Acceptance (small version): shoal's policy against every other policy.

The full comparison (8 Pollux workloads, 5 Philly samples with spot revocations) is
`bench/sim_compare.py`, recorded in docs/BENCHMARKS.md (section 3). Here: one Pollux workload on
Pollux's 64-T4 cluster and two seeded 300-job Philly samples on the heterogeneous 64-GPU cluster
with half its nodes spot (measured GCE lifetimes). Claim checked: shoal has the lowest mean
average-JCT and the lowest mean total cost over these three runs. No tolerance: strictly lower.
"""

import statistics

import pytest

from shoal.sim.policies import POLICIES
from shoal.sim.run import simulate
from shoal.sim.simulator import SimConfig

CASES = [
    ("pollux:4", "pollux", None, 0),
    ("philly:300:2", "hetero-64", "0.5:gce", 2),
    ("philly:300:4", "hetero-64", "0.5:gce", 4),
]


@pytest.mark.slow  # a simulator acceptance run: seconds on a shared host
def test_shoal_has_lowest_mean_jct_and_cost():
    means = {}
    for policy in POLICIES:
        runs = [simulate(policy, w, c, s, SimConfig(seed=seed)) for w, c, s, seed in CASES]
        means[policy] = (
            statistics.mean(r["avg_jct_s"] for r in runs),
            statistics.mean(r["total_cost_usd"] for r in runs),
        )
    jct, cost = means.pop("shoal")
    for policy, (other_jct, other_cost) in means.items():
        assert jct < other_jct, (policy, jct, other_jct)
        assert cost < other_cost, (policy, cost, other_cost)
