"""Optimus (EuroSys'18) with an oracle, as Pollux's evaluation runs it (Optimus+Oracle).

Every job trains at its fixed workload batch size. Each scheduling round (60 s), in arrival
order, every active job gets one GPU while GPUs last; then GPUs go one at a time to the job with
the largest marginal gain, the remaining time it saves: (step time on n GPUs - step time on n + 1)
x remaining steps. The oracle is twofold, as in Pollux's simulator: step times are the measured
ones (no online fit) and the remaining steps are exact, read off the job's own training curve at
its batch size. A job's GPUs are bounded as Pollux's simulator bounds them (`max_replicas`:
doubling from the most it has run on, at most 64; ncf 1). Jobs whose count is unchanged keep
their placement; the others are placed, smallest first, on the nodes with most free GPUs, as
the artifact's Optimus does. Rescaling is by checkpoint-restart. Step times assume one GPU kind
(the profiled one), as Pollux's evaluation did.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cache

from shoal.perf.goodput import gain, goodput_model
from shoal.perf.profiles import PROFILE_KIND
from shoal.sim.jobs import JobRun
from shoal.sim.policies.pollux import max_replicas
from shoal.sim.policy import ClusterView, Decision


@cache
def step_time(app: str, batch: int, n: int, per_node: int) -> float:
    """Seconds per step of `app` at global `batch` on n consolidated profiled-kind GPUs."""
    return goodput_model(app).step_time_s(((PROFILE_KIND, n),), -(-n // per_node), batch)


@cache
def _steps_after(app: str, batch: int) -> tuple[list[float], list[float], list[float]]:
    """Curve points, r(S) at each piece's midpoint, and the steps left from each point."""
    profile = goodput_model(app).profile
    points = [0.0, *profile.grad_progress]
    gains = []
    for a, b in zip(points, points[1:], strict=False):
        sqr, var = profile.grad_stats((a + b) / 2, batch)
        gains.append(gain(batch, profile.init_batch_size, sqr, var))
    after = [0.0] * len(points)
    for i in range(len(points) - 2, -1, -1):
        after[i] = after[i + 1] + (points[i + 1] - points[i]) / gains[i]
    return points, gains, after


def remaining_steps(app: str, batch: int, progress: float) -> float:
    """Exact steps to finish from `progress` at a fixed batch (the oracle)."""
    points, gains, after = _steps_after(app, batch)
    i = min(max(bisect.bisect_right(points, progress) - 1, 0), len(gains) - 1)
    return after[i + 1] + max(points[i + 1] - progress, 0.0) / gains[i]


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
            return saved * remaining_steps(app, batch, job.progress)

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
