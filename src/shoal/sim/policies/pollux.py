"""A Pollux-style goodput policy (a greedy heuristic, not Pollux's genetic algorithm).

Like Pollux (OSDI'21) it re-plans every tick, co-adapts each job's GPU count and batch size to
maximise goodput, treats all GPUs as identical (Pollux assumes a homogeneous cluster: it plans
with the profiled kind's speed and places GPUs without regard to kind), and rescales by
checkpoint-restart. It differs from Pollux in the search: Pollux evolves whole cluster
allocations with NSGA-II to maximise a power mean (p = -1) of speedups; here a greedy
water-fill hands out one GPU at a time to the job whose speedup power-mean term gains most,
`1/speedup(n) - 1/speedup(n+1)`, which is the exact marginal of the same p = -1 objective. To
stand in for Pollux's restart penalty, a running job is only resized when the planned speedup
differs from its current one by at least `min_change`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import PROFILE_KIND
from shoal.sim.jobs import JobRun
from shoal.sim.policies.common import retune
from shoal.sim.policies.fill import waterfill
from shoal.sim.policy import ClusterView, Decision

_ANY = "any"


@dataclass
class PolluxPolicy:
    min_change: float = 0.1
    gpus_per_node: int = 4  # for the planner's node-count estimate
    max_gpus_per_job: int = 64
    name: str = "pollux"
    periodic: bool = True
    inplace_rescale: bool = False

    def _speedup(self, job: JobRun, n: int) -> float:
        if n <= 0:
            return 0.0
        model = goodput_model(job.spec.app)
        nodes = -(-n // self.gpus_per_node)
        rate = model.best_batch(((PROFILE_KIND, n),), nodes, job.progress)[1]
        base = model.best_batch(((PROFILE_KIND, 1),), 1, job.progress)[1]
        return rate / base

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        jobs = sorted(view.running + view.pending, key=lambda j: (j.spec.arrival_s, j.name))
        total = sum(n.num_gpus for n in view.nodes if n.alive)

        def score(job: JobRun, counts: dict[str, int], kind: str) -> float:
            n = counts[_ANY]
            return 1.0 / self._speedup(job, n) - 1.0 / self._speedup(job, n + 1)

        def max_gpus(job: JobRun) -> int:
            return job.spec.requested_gpus if not job.spec.elastic else self.max_gpus_per_job

        plan = waterfill(jobs, {_ANY: total}, lambda j, left: _ANY, score, max_gpus)
        target = {name: counts[_ANY] for name, counts in plan.items()}
        return apply_counts(view, jobs, target, self._speedup, self.min_change)


def apply_counts(
    view: ClusterView,
    jobs: list[JobRun],
    target: dict[str, int],
    speedup: Callable[[JobRun, int], float],
    min_change: float,
) -> dict[str, Decision]:
    """Turn per-job GPU counts into placements, keeping jobs whose change is too small."""
    decisions: dict[str, Decision] = {}
    keep = set()
    for job in jobs:
        n, cur = target.get(job.name, 0), job.num_gpus
        if job.running and (n == cur or not job.spec.elastic):  # gangs are never resized
            keep.add(job.name)
        elif job.running and n > 0 and job.spec.elastic:
            ratio = speedup(job, n) / max(speedup(job, cur), 1e-12)
            if abs(ratio - 1.0) < min_change:
                keep.add(job.name)
    for job in jobs:
        if job.name in keep and job.spec.elastic:
            retune(job, decisions)
        if job.running and job.name not in keep:
            view.release(job.alloc)
            decisions[job.name] = Decision({})
    for job in jobs:
        if job.name in keep or target.get(job.name, 0) <= 0:
            continue
        n = target[job.name] if job.spec.elastic else job.spec.requested_gpus
        count = min(n, view.free_gpus) if job.spec.elastic else n
        alloc = view.pack(count) if count > 0 else None
        if alloc is None:
            continue  # a gang that does not fit whole is not packed at all
        model = goodput_model(job.spec.app)
        kinds: dict[str, int] = {}
        for node_id, k in alloc.items():
            kind = view.node(node_id).kind
            kinds[kind] = kinds.get(kind, 0) + k
        counts = tuple(sorted(kinds.items()))
        if job.spec.elastic:
            batch = model.best_batch(counts, len(alloc), job.progress)[0]
            decisions[job.name] = Decision(alloc, batch)
        else:  # a gang: one equal share per GPU, its own batch
            decisions[job.name] = Decision(alloc, parallelism=n)
    return decisions
