"""Pollux (OSDI'21) as its simulator runs it: power-mean speedup over whole-cluster allocations.

Every scheduling round (60 s) the policy re-optimises the GPU count of every active job to
maximise the power mean (p = -1) of the jobs' speedups, each normalised to the speedup the job
would get on its fair share of the cluster (total GPUs / active jobs), as Pollux's artifact
does. A job's speedup at n GPUs is its best goodput over batch sizes on n GPUs consolidated on
ceil(n / GPUs per node) nodes, divided by its best goodput on one GPU (`control.batch`). With
p = -1 the power mean is maximised by minimising sum_j base_j / speedup_j(n_j). Then:
- restart penalty: a running job whose count changes has its speedup multiplied by Pollux's
  restart factor max(age - 30 s x restarts, 0) / (age + 30 s);
- max replicas: min(max(2 x the most GPUs the job has run on, 1), 64, max batch / min local
  batch), and ncf at most 1, as Pollux's simulator sets them, so a job at most doubles per round;
- interference avoidance: at most one distributed (multi-node) job per node;
- jobs run with the goodput-best batch size of their placement, rescaled by checkpoint-restart.
Departures from the artifact, each deliberate:
- the search: Pollux evolves node-level allocations with NSGA-II (population 100); here a dynamic
  program over GPU counts finds the exact optimum of the same objective over consolidated
  placements (tests/unit/sim/test_pollux_optimiser.py checks it is never worse than a seeded
  genetic search on the same inputs), and placement is a separate best-fit step that keeps
  unchanged jobs where they are; a count that cannot be placed under the interference rule is
  shrunk until it fits (the role of Pollux's repair operator);
- a job without GPUs has speedup 0, which sends a p = -1 power mean to 0 for every plan while
  jobs outnumber GPUs; we charge it a large constant instead, larger for earlier arrivals, so
  the plan serves as many jobs as it can, oldest first;
- the restart factor applies to running jobs only (a first start is not a restart: the factor
  is 0 at age 0 and would keep an arriving job off the cluster);
- speedups come from the measured profiles, not from Pollux's online fit of them; the speedup
  table is evaluated once per epoch of the job's gradient-statistics curve;
- Pollux assumes one GPU kind: on a mixed cluster it plans every GPU as the profiled kind;
- the cluster does not autoscale (Pollux's second objective, cluster size, is not used).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cache

import numpy as np

from shoal.control.batch import best_batch
from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import PROFILE_KIND, load_profile
from shoal.sim.jobs import JobRun
from shoal.sim.policies.common import retune
from shoal.sim.policy import ClusterView, Decision

RESTART_PENALTY_S = 30.0
MAX_REPLICAS = 64  # Pollux's simulator caps every job here
UNSERVED = 1e6  # the cost of a job left without GPUs (see the module docstring)


@cache
def speedup_table(app: str, epoch: int, max_gpus: int, per_node: int) -> tuple[float, ...]:
    """Speedup of `app` on 0..max_gpus GPUs at the curve point opening `epoch` (memoised)."""
    points = goodput_model(app).profile.grad_progress
    progress = points[epoch - 1] if epoch > 0 else 0.0
    base = best_batch(app, {PROFILE_KIND: 1}, 1, progress)[1]
    out = [0.0]
    for n in range(1, max_gpus + 1):
        rate = best_batch(app, {PROFILE_KIND: n}, -(-n // per_node), progress)[1]
        out.append(rate / base)
    return tuple(out)


def job_speedups(job: JobRun, max_gpus: int, per_node: int) -> tuple[float, ...]:
    """The job's speedup table at its current progress."""
    points = goodput_model(job.spec.app).profile.grad_progress
    epoch = bisect.bisect_left(points, job.progress)
    return speedup_table(job.spec.app, epoch, max_gpus, per_node)


def max_replicas(job: JobRun) -> int:
    """Pollux's simulator's bound: double the most GPUs run on, 64, batch bounds; ncf 1."""
    if not job.spec.elastic:
        return job.spec.requested_gpus
    if job.spec.app == "ncf":
        return 1
    profile = load_profile(job.spec.app)
    min_local = int(profile.curves[(1, 1)].local_bsz[0])
    ran = job.data.get("pollux_max", 0)
    return max(1, min(max(2 * ran, 1), MAX_REPLICAS, profile.max_batch_size // min_local))


def restart_factor(age_s: float, restarts: int) -> float:
    return max(age_s - RESTART_PENALTY_S * restarts, 0.0) / (age_s + RESTART_PENALTY_S)


def optimise_counts(costs: list[np.ndarray], capacity: int) -> list[int]:
    """GPU counts minimising sum_j costs[j][n_j] subject to sum_j n_j <= capacity (exact).

    A dynamic program over jobs: best[g] is the least cost of the jobs so far on at most g GPUs.
    Ties go to the smallest count, so the answer is deterministic. GPUs beyond every job's
    largest count change nothing (each job takes its own best), so the table stops there: on
    100,000 GPUs it was 100,000 rows per job per round, and a simulation hung.
    """
    capacity = min(capacity, sum(len(cost) - 1 for cost in costs))
    best = np.zeros(capacity + 1)
    room = np.arange(capacity + 1)
    picks = []
    for cost in costs:
        m = min(len(cost) - 1, capacity)
        before = room[:, None] - np.arange(m + 1)[None, :]
        total = np.where(before >= 0, best[np.maximum(before, 0)] + cost[None, : m + 1], np.inf)
        pick = np.argmin(total, axis=1)
        best = total[room, pick]
        picks.append(pick)
    counts, left = [], capacity
    for pick in reversed(picks):
        n = int(pick[left])
        counts.append(n)
        left -= n
    return counts[::-1]


def objective(costs: list[np.ndarray], counts: list[int]) -> float:
    return float(sum(cost[n] for cost, n in zip(costs, counts, strict=True)))


@dataclass
class PolluxPolicy:
    name: str = "pollux"
    periodic: bool = True
    inplace_rescale: bool = False

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        jobs = sorted(view.running + view.pending, key=lambda j: (j.spec.arrival_s, j.name))
        if not jobs:
            return {}
        for job in view.running:  # Pollux profiles a placement once the job has run on it
            if view.now_s >= job.resume_s:
                job.data["pollux_max"] = max(job.data.get("pollux_max", 0), job.num_gpus)
        capacity = sum(n.num_gpus for n in view.nodes if n.alive)
        per_node = max(view.gpus_per_node().values())
        costs = [
            self._costs(view, job, rank, len(jobs), capacity, per_node)
            for rank, job in enumerate(jobs)
        ]
        counts = optimise_counts(costs, capacity)
        return place_counts(view, jobs, counts)

    def _costs(
        self, view: ClusterView, job: JobRun, rank: int, num_jobs: int, capacity: int, per_node: int
    ) -> np.ndarray:
        """cost[n] = base / speedup(n): this job's term of the p = -1 objective at n GPUs."""
        limit = max_replicas(job)
        speedup = job_speedups(job, max(limit, job.num_gpus), per_node)
        fair = capacity / num_jobs
        base = speedup[min(int(fair), limit)] if fair >= 1 else fair
        unserved = UNSERVED * (1.0 + (num_jobs - rank) * 1e-6)  # older jobs first
        cost = np.full(limit + 1, unserved)
        factor = 1.0
        if job.running:
            factor = restart_factor(view.now_s - job.spec.arrival_s, job.restarts)
        for n in range(1, limit + 1):
            if not job.spec.elastic and n != job.spec.requested_gpus:
                continue
            s = speedup[n] * (1.0 if n == job.num_gpus else factor)
            if s > 0:
                cost[n] = base / s
        if job.running and job.num_gpus > limit:  # keeping a larger allocation stays possible
            cost = np.append(cost, np.full(job.num_gpus - limit, unserved))
            cost[job.num_gpus] = base / speedup[job.num_gpus]
        return cost


def place_counts(view: ClusterView, jobs: list[JobRun], counts: list[int]) -> dict[str, Decision]:
    """Placements for the planned counts: unchanged jobs stay, the rest are placed best-fit.

    At most one distributed job per node (Pollux's interference avoidance); an elastic job whose
    count cannot be placed under that rule is shrunk until it can.
    """
    decisions: dict[str, Decision] = {}
    shared: set[int] = set()  # nodes that already host a distributed job
    moved = []
    for job, n in zip(jobs, counts, strict=True):
        if job.running and n == job.num_gpus:
            if len(job.alloc) > 1:
                shared.update(job.alloc)
            if job.spec.elastic:
                retune(job, decisions)
        elif job.running or n > 0:
            moved.append((job, n))
    for job, _ in moved:
        if job.running:
            view.release(job.alloc)
            decisions[job.name] = Decision({})
    for job, n in sorted(moved, key=lambda jn: (-jn[1], jn[0].spec.arrival_s, jn[0].name)):
        alloc = None
        while n > 0 and alloc is None:
            alloc = _fit(view, n, shared)
            n = n - 1 if job.spec.elastic else 0
        if alloc is None:
            continue
        if len(alloc) > 1:
            shared.update(alloc)
        if job.spec.elastic:
            kinds: dict[str, int] = {}
            for node_id, k in alloc.items():
                kind = view.node(node_id).kind
                kinds[kind] = kinds.get(kind, 0) + k
            batch = best_batch(job.spec.app, kinds, len(alloc), job.progress)[0]
            decisions[job.name] = Decision(alloc, batch)
        else:
            decisions[job.name] = Decision(alloc, parallelism=sum(alloc.values()))
    return decisions


def _fit(view: ClusterView, n: int, shared: set[int]) -> dict[int, int] | None:
    """n GPUs on one node (best fit), else across nodes that host no distributed job."""
    single = [i for i, f in view.free.items() if f >= n]
    if single:
        return view.pack(n, single)
    return view.pack(n, [i for i, f in view.free.items() if f > 0 and i not in shared])
