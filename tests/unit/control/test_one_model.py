"""The simulator's shoal policy and the live controller decide through the same functions.

The within-job split and the speed estimate are the step-time model's (`perf.step_time.split`,
`perf.step_time.estimate_seconds`): spy on them during a tiny simulation (a gang spanning two
kinds, so its indivisible units are split by speed) and a Rebalancer's plan, and check both
drivers went through the same function objects and that the same inputs give the same plan.
"""

from shoal.cluster.nodes import parse_cluster
from shoal.control import Rebalancer
from shoal.perf import goodput, step_time
from shoal.perf.profiles import load_profile
from shoal.sim.jobs import JobSpec
from shoal.sim.policies import make_policy
from shoal.sim.simulator import SimConfig, Simulator


def _spy(monkeypatch):
    calls = {"split": [], "estimate": []}
    split, estimate = step_time.split, step_time.estimate_seconds

    def spy_split(m, seconds, caps=None):
        calls["split"].append((m, list(seconds)))
        return split(m, seconds, caps)

    def spy_estimate(measured, priors):
        calls["estimate"].append((list(measured), list(priors)))
        return estimate(measured, priors)

    monkeypatch.setattr(step_time, "split", spy_split)
    monkeypatch.setattr(step_time, "estimate_seconds", spy_estimate)
    monkeypatch.setattr(goodput, "_MODELS", {})  # no memoised speeds: the model is evaluated
    return calls


def test_simulator_and_rebalancer_share_the_split_and_the_estimate(monkeypatch):
    calls = _spy(monkeypatch)
    work = load_profile("cifar10").total_progress / 50
    gang = JobSpec("g", 0.0, "cifar10", 3, 512, work, elastic=False)
    cluster = parse_cluster("1x2xv100,1x2xk80")
    Simulator([gang], cluster, make_policy("shoal"), SimConfig(refresh_points=1)).run()
    assert calls["split"] and calls["estimate"], "the simulator did not use the step-time model"
    units, seconds = calls["split"][0]
    assert units == 3 and len(seconds) == 3
    sim_plan = step_time.split(units, seconds)
    calls["split"].clear()
    calls["estimate"].clear()

    reb = Rebalancer(units, replan_every=1)
    reb.regroup(["a", "b", "c"], seconds, [None, None, None])
    assert calls["split"][-1] == (units, seconds) and calls["estimate"][-1] == ([None] * 3, seconds)
    assert reb.plan == sim_plan
    # seconds per unit are 1 / speed: a K80 is ~10x slower here, so a V100 takes two units
    assert sim_plan.counts == (2, 1, 0)
