"""The event core: conservation, exact single-job timing, revocations, determinism."""

import math
import random

import pytest

from shoal.cluster.nodes import parse_cluster
from shoal.errors import UserError
from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import load_profile
from shoal.sim.jobs import JobSpec
from shoal.sim.policies import POLICIES, make_policy
from shoal.sim.policy import Decision
from shoal.sim.report import summarize
from shoal.sim.simulator import SimConfig, Simulator
from shoal.sim.workloads import load_workload


class FixedLifetime:
    """Every spot node lives exactly `seconds` (then is revoked)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def sample_lifetime_s(self, kind, rng):
        return self.seconds


def _job(name="j", arrival=0.0, gpus=4, elastic=True, work=None, app="cifar10"):
    work = work or load_profile(app).total_progress / 20
    return JobSpec(name, arrival, app, gpus, 512, work, elastic=elastic)


def test_single_gang_job_runs_for_its_work_over_its_rate():
    job = _job(elastic=False)
    cfg = SimConfig(refresh_points=1, restart_s=30.0)
    result = Simulator([job], parse_cluster("1x4xt4"), make_policy("yarn-cs"), cfg).run()
    model = goodput_model("cifar10")
    (run,) = result.jobs
    # starts at the first tick (t=0), stalls restart_s, then runs for the integral of
    # d(progress)/rate: efficiency improves along the way (fine midpoint rule here)
    pieces = 4000
    width = job.total_progress / pieces
    seconds = sum(
        width / model.progress_rate((("t4", 4),), 1, 512, (i + 0.5) * width) for i in range(pieces)
    )
    assert run.finish_s == pytest.approx(30.0 + seconds, rel=1e-2)
    # the rate at the start alone would be far slower: the integral matters
    assert 30.0 + job.total_progress / model.progress_rate((("t4", 4),), 1, 512, 0.0) > (
        1.1 * run.finish_s
    )
    assert run.gpu_s == pytest.approx(4 * run.finish_s)
    assert result.cost_usd_by_job["j"] == pytest.approx(4 * 0.35 * run.finish_s / 3600)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_finishes_every_job_without_overbooking(policy):
    jobs = load_workload("pollux:2")[:40]
    result = Simulator(jobs, parse_cluster("hetero-64"), make_policy(policy), SimConfig()).run()
    assert all(j.finish_s is not None and j.finish_s >= j.spec.arrival_s for j in result.jobs)
    assert max(n for _, n in result.timeline) <= 64
    assert all(n.free == n.num_gpus for n in result.nodes)  # everything returned at the end
    s = summarize(result)
    assert 0 < s["gpu_utilization"] <= 1 and s["total_cost_usd"] > 0


class FirstDies:
    """The first spot node is revoked at `seconds`; every later one lives forever."""

    def __init__(self, seconds):
        self.left = [seconds]

    def sample_lifetime_s(self, kind, rng):
        return self.left.pop() if self.left else math.inf


def test_gang_restarts_from_its_last_checkpoint():
    cfg = SimConfig(checkpoint_interval_s=600.0, replace_delay_s=100.0, refresh_points=1)
    gang = _job("gang", gpus=4, elastic=False, work=load_profile("cifar10").total_progress)
    spec = parse_cluster("1x4xt4:spot")
    r = Simulator([gang], spec, make_policy("yarn-cs"), cfg, FirstDies(1000.0)).run()
    (run,) = r.jobs
    total = gang.total_progress
    # one refresh point: one constant rate over the whole run
    rate = goodput_model("cifar10").segment_rate((("t4", 4),), 1, 512, 0.0, total)
    # ran from t=30 (after the restart stall); checkpoints at 630; revoked at 1000
    assert run.lost_progress == pytest.approx(rate * 370.0, rel=1e-6)
    assert run.restarts == 1 and run.revocations == 1


class SpreadOnce:
    """A minimal third-party policy: start each pending job on 2 GPUs of every node."""

    name = "spread"
    periodic = False
    inplace_rescale = True

    def schedule(self, view):
        return {
            job.name: Decision({n.node_id: 2 for n in view.nodes if n.alive})
            for job in view.pending
            if not job.ran_before
        }


def test_elastic_job_shrinks_and_loses_no_work():
    cfg = SimConfig(replace_delay_s=1e6, refresh_points=1)
    elastic = _job("el", gpus=8, work=load_profile("cifar10").total_progress)
    spec = parse_cluster("2x4xt4:spot")
    r = Simulator([elastic], spec, SpreadOnce(), cfg, FirstDies(300.0)).run()
    (run,) = r.jobs
    assert run.revocations == 1 and run.lost_progress == 0 and run.finish_s is not None
    assert run.restarts == 0 and run.num_gpus == 0  # no restart, and done at the end
    # shrunk in place: 2 GPUs on each node until the revocation at 300 s, then the surviving
    # node's 2 to the end (no replacement comes: replace_delay_s is 1e6)
    assert run.gpu_s == pytest.approx(4 * 300.0 + 2 * (run.finish_s - 300.0))
    assert (300.0, 2) in r.timeline
    assert r.revoked_nodes == 1


def test_revoked_spot_gpu_is_billed_until_revocation():
    spec = parse_cluster("1x4xt4:spot")
    cfg = SimConfig(replace_delay_s=100.0, refresh_points=1)
    job = _job("el", gpus=4)
    r = Simulator([job], spec, make_policy("shoal"), cfg, FixedLifetime(60.0)).run()
    (run,) = r.jobs
    # billed GPU-seconds equal held GPU-seconds: nothing billed while the node was gone
    held_usd = run.gpu_s * 0.11 / 3600
    assert r.cost_usd_by_job["el"] == pytest.approx(held_usd, rel=1e-9)
    assert run.finish_s > run.gpu_s / 4  # it waited for the replacement node


def test_same_seed_same_result_and_seeds_differ_with_spot():
    jobs = load_workload("pollux:3")[:30]
    spec = parse_cluster("hetero-64").with_spot_fraction(0.5)

    class Exp:
        def sample_lifetime_s(self, kind, rng):
            return rng.expovariate(1 / 7200.0)

    def run(seed):
        r = Simulator(jobs, spec, make_policy("shoal"), SimConfig(seed=seed), Exp()).run()
        return summarize(r)

    assert run(1) == run(1)
    assert run(1)["avg_jct_s"] != run(2)["avg_jct_s"]


def test_no_revocations_model_never_revokes():
    jobs = [_job(f"j{i}", arrival=100.0 * i) for i in range(5)]
    spec = parse_cluster("2x4xt4:spot")
    before = random.getstate()
    r = Simulator(jobs, spec, make_policy("pollux"), SimConfig()).run()
    assert r.revoked_nodes == 0
    assert math.isinf(r.nodes[0].revoke_s)
    # the run draws only from its own seeded RNGs: the global one is left where it was
    assert random.getstate() == before


def test_results_do_not_depend_on_what_ran_before():
    from shoal.perf import goodput

    jobs = load_workload("pollux:5")[:40]

    def shoal_run():
        return summarize(Simulator(jobs, parse_cluster("pollux"), make_policy("shoal")).run())

    goodput._MODELS.clear()
    first = shoal_run()
    goodput._MODELS.clear()
    other = load_workload("pollux:2")[40:80]
    Simulator(other, parse_cluster("pollux"), make_policy("pollux")).run()
    assert shoal_run() == first


@pytest.mark.parametrize("policy", ["pollux", "shoal"])
def test_a_goodput_policy_grows_a_lone_job_as_its_scaling_improves(policy):
    # DeepSpeech2 scales to 1.31x over one T4 at best in its first epoch (the tiny batch its
    # early gradient noise allows) and to ~10x after it: a policy that plans from the job's
    # progress must be asked again as the job trains, with nothing else happening in the
    # cluster (a simulator that paused rounds until the next arrival left it on 1 T4 for 5 h)
    spec = JobSpec("ds2", 0.0, "deepspeech2", 1, 20, load_profile("deepspeech2").total_progress)
    result = Simulator([spec], parse_cluster("pollux"), make_policy(policy), SimConfig()).run()
    (run,) = result.jobs
    assert max(n for _, n in result.timeline) >= 12
    assert run.finish_s < 3600.0


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_job_wider_than_the_cluster_under_a_gang_policy(policy):
    """YARN-CS and Tiresias run every job as a gang: one wider than the cluster never started
    (exit 0, makespan 0 or the horizon). Policies that resize elastic jobs still run it."""
    wide = _job("wide", gpus=9)
    if policy in ("yarn-cs", "tiresias"):
        with pytest.raises(UserError, match="gang job wide needs 9 GPUs; the cluster has 8"):
            Simulator([wide], parse_cluster("2x4xt4"), make_policy(policy))
    else:
        result = Simulator([wide], parse_cluster("2x4xt4"), make_policy(policy)).run()
        assert result.jobs[0].finish_s is not None


def test_a_gang_wider_than_its_preferred_kind_is_an_error():
    """A gang is placed on its preferred kind only: 8 GPUs on a cluster of 4 V100 and 8 T4 never
    started under YARN-CS; an elastic policy runs it within the V100s."""
    from dataclasses import replace

    job = replace(_job("v", gpus=8), preferred_kind="v100")
    cluster = parse_cluster("1x4xv100,2x4xt4")
    with pytest.raises(UserError, match="needs 8 GPUs; the cluster has 4 v100 GPUs, its preferred"):
        Simulator([job], cluster, make_policy("yarn-cs"))
    assert Simulator([job], cluster, make_policy("shoal")).run().jobs[0].finish_s is not None


def test_a_repeated_job_name_is_an_error():
    """Pending, running and billing are keyed by name: a repeat lost a job from the results."""
    jobs = [_job("j"), _job("j", arrival=5.0)]
    with pytest.raises(UserError, match="job name 'j' repeats"):
        Simulator(jobs, parse_cluster("2x4xt4"), make_policy("shoal"))


def test_a_run_stopped_at_the_horizon_ends_and_bills_there():
    # a short job finishes, a long one is still running when the simulation stops at its
    # horizon: the makespan is the horizon (not the short job's end, nor the first event past
    # the horizon), and the long job's GPUs are billed until then
    short, long_ = _job("short", gpus=2, elastic=False), _job("long", gpus=2, elastic=False)
    long_ = JobSpec("long", 0.0, "cifar10", 2, 512, long_.total_progress * 200, elastic=False)
    spec, policy = parse_cluster("1x4xt4"), make_policy("yarn-cs")
    alone = Simulator([short], spec, policy, SimConfig(refresh_points=1)).run()
    horizon = 3 * alone.makespan_s
    r = Simulator([short, long_], spec, make_policy("yarn-cs"),
                  SimConfig(refresh_points=1, max_time_s=horizon)).run()  # fmt: skip
    finished = {j.name for j in r.jobs if j.finish_s is not None}
    assert finished == {"short"} and r.makespan_s == horizon
    ratio = r.cost_usd_by_job["long"] / r.cost_usd_by_job["short"]
    assert ratio == pytest.approx(horizon / alone.makespan_s, rel=0.02)
    assert summarize(r)["finished"] == 1
