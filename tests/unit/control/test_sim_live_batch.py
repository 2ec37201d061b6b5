"""The simulator's adaptive jobs and a live run decide the batch through the same policy call.

`control.batch.best_batch` (what the simulator's policies call) hands the pollux BatchPolicy the
application's profiled statistics as StepStats and the placement's step time as the throughput
model. Spy on the policy class's `decide`: a small simulation goes through it, and a live policy
built by `make_policy` (as the runtime builds it) given the same statistics and context makes
the same call with the same result.
"""

from shoal.cluster.nodes import parse_cluster
from shoal.control import batch, make_policy
from shoal.control.batch_policy import PolluxPolicy
from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import load_profile
from shoal.sim.jobs import JobSpec
from shoal.sim.policies import make_policy as make_sim_policy
from shoal.sim.simulator import SimConfig, Simulator


def _spy(monkeypatch):
    calls = []
    decide = PolluxPolicy.decide

    def spy(self, stats, context):
        out = decide(self, stats, context)
        calls.append((type(self), stats, context, out))
        return out

    monkeypatch.setattr(PolluxPolicy, "decide", spy)
    monkeypatch.setattr(batch, "_DECISIONS", {})  # no memoised choices: decide afresh
    return calls


def test_sim_and_live_make_the_same_policy_call(monkeypatch):
    calls = _spy(monkeypatch)
    progress = load_profile("cifar10").grad_progress[3]
    chosen, rate = batch.best_batch("cifar10", {"v100": 2, "k80": 2}, 2, progress + 1.0)
    assert calls, "best_batch did not decide through the pollux policy"
    kind, stats, context, out = calls[-1]
    assert kind is PolluxPolicy and chosen == out
    assert rate == goodput_model("cifar10").progress_rate(
        (("k80", 2), ("v100", 2)), 2, chosen, progress + 1.0
    )
    calls.clear()
    live = make_policy("pollux", micro_batch_size=1, bounds=None, every=1, candidates=12)
    assert live.decide(stats, context) == out
    assert calls[-1][0] is PolluxPolicy and calls[-1][1:] == (stats, context, out)


def test_simulated_adaptive_jobs_call_the_policy(monkeypatch):
    calls = _spy(monkeypatch)
    work = load_profile("cifar10").total_progress / 50
    jobs = [JobSpec("a", 0.0, "cifar10", 4, 128, work)]
    cluster = parse_cluster("1x2xv100,1x2xk80")
    Simulator(jobs, cluster, make_sim_policy("shoal"), SimConfig(refresh_points=1)).run()
    assert calls and all(kind is PolluxPolicy for kind, *_ in calls)
