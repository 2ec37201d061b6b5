"""Optimus (EuroSys'18) with an oracle, as Pollux's evaluation runs it (Optimus+Oracle).

Every job trains at its fixed workload batch size. Each scheduling round (60 s), in arrival
order, every active job gets one GPU while GPUs last; then GPUs go one at a time to the job with
the largest marginal gain, the remaining time it saves: (step time on n GPUs - step time on n + 1)
x remaining steps. The oracle is twofold, as in Pollux's simulator: step times are the measured
ones (no online fit) and the remaining steps are exact, read off the job's own training curve at
its batch size from its progress to its own end (`GoodputModel.steps_between`; a trace's job
ends before or after the curve's end). A job's GPUs are bounded as Pollux's simulator bounds
them (`max_replicas`: doubling from the most it has run on, at most 64; ncf 1). Jobs whose count
is unchanged keep their placement; the others are placed, smallest first, on the nodes with most
free GPUs, as the artifact's Optimus does. Rescaling is by checkpoint-restart. Step times assume
one GPU kind (the profiled one), as Pollux's evaluation did.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import PROFILE_KIND
from shoal.sim.jobs import JobRun
from shoal.sim.policies.pollux import max_replicas
from shoal.sim.policy import ClusterView, Decision


@cache
def step_time(app: str, batch: int, n: int, per_node: int) -> float:
    """Seconds per step of `app` at global `batch` on n consolidated profiled-kind GPUs."""
    return goodput_model(app).step_time_s(((PROFILE_KIND, n),), -(-n // per_node), batch)


@dataclass
class OptimusPolicy:
    name: str = "optimus"
    periodic: bool = True
    inplace_rescale: bool = False

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        jobs = sorted(view.running + view.pending, key=lambda j: (j.spec.arrival_s, j.name))
        for job in view.running:
            if view.now_s >= job.resume_s:
                job.data["pollux_max"] = max(job.data.get("pollux_max", 0), job.num_gpus)
        left = sum(n.num_gpus for n in view.nodes if n.alive)
        per_node = max(view.gpus_per_node().values(), default=1)
        counts = {}
        for job in jobs:  # one GPU each, first come first served
            counts[job.name] = 1 if left > 0 else 0
            left -= counts[job.name]
        by_name = {j.name: j for j in jobs}

        def marginal(job: JobRun) -> float:
            n = counts[job.name]
            if n == 0 or n + 1 > max_replicas(job):
                return 0.0
            app, batch = job.spec.app, job.spec.batch_size
            saved = step_time(app, batch, n, per_node) - step_time(app, batch, n + 1, per_node)
            left_steps = goodput_model(app).steps_between(
                batch, job.progress, job.spec.total_progress
            )
            return saved * left_steps

        gains = {j.name: marginal(j) for j in jobs}
        while left > 0 and gains and max(gains.values()) > 0:
            name = max(gains, key=lambda k: gains[k])  # ties: the earliest arrival
            counts[name] += 1
            left -= 1
            gains[name] = marginal(by_name[name])
        return _place(view, jobs, counts)


def _place(view: ClusterView, jobs: list[JobRun], counts: dict[str, int]) -> dict[str, Decision]:
    decisions: dict[str, Decision] = {}
    moved = [j for j in jobs if counts[j.name] != j.num_gpus]
    for job in moved:
        if job.running:
            view.release(job.alloc)
            decisions[job.name] = Decision({})
    for job in sorted(moved, key=lambda j: counts[j.name]):
        want = counts[job.name]
        if want <= 0 or view.free_gpus < want:
            continue
        alloc: dict[int, int] = {}
        while want > 0:  # the node with most free GPUs first (lowest id on ties)
            node_id = max(view.free, key=lambda i: (view.free[i], -i))
            k = min(want, view.free[node_id])
            view.take({node_id: k})
            alloc[node_id] = alloc.get(node_id, 0) + k
            want -= k
        decisions[job.name] = Decision(alloc)
    return decisions
