"""Acceptance: Pollux's published workload-6 figures on its 16 x 4 T4 cluster.

Inputs: Pollux's workload-6 at job load 1.0 (`pollux:6`, 160 jobs), cluster `pollux` (16 nodes x
4 T4, on-demand), default simulator settings (60 s rounds, 30 s restarts). Published (Pollux
OSDI'21 artifact) average JCT: Pollux 2446 s, Tiresias 3470 s, Optimus+Oracle 5302 s. Tolerance:
each of ours within +-15 % of its published figure. Tiresias and Optimus run each job at its
workload GPU count (Tiresias) or fixed batch size (both); Pollux is `sim.policies.pollux`.
"""

import pytest

from shoal.sim.run import simulate

PUBLISHED_S = {"pollux": 2446.0, "tiresias": 3470.0, "optimus": 5302.0}


@pytest.mark.parametrize("policy", sorted(PUBLISHED_S))
def test_workload6_average_jct_matches_published(policy):
    summary = simulate(policy, "pollux:6", "pollux")
    assert summary["finished"] == 160
    assert summary["avg_jct_s"] == pytest.approx(PUBLISHED_S[policy], rel=0.15)
