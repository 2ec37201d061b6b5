"""Greedy water-filling of GPUs over jobs, the core shared by the goodput policies.

Every job first gets one GPU (in priority order, while GPUs last), then GPUs go one at a time to
the (job, kind) pair with the highest marginal score until no pair scores above zero. A job's
marginal scores are recomputed only after it gains a GPU (a lazy max-heap), so a round costs
O((jobs + GPUs) x kinds) evaluations of the policy's scoring function.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from shoal.sim.jobs import JobRun

Counts = dict[str, int]
# score(job, counts, kind) -> marginal value of one more GPU of `kind` (<= 0: do not add)
Score = Callable[[JobRun, Counts, str], float]


def waterfill(
    jobs: list[JobRun],
    free: Counts,
    first_kind: Callable[[JobRun, Counts], str | None],
    score: Score,
    max_gpus: Callable[[JobRun], int],
) -> dict[str, Counts]:
    """Per-job GPU counts by kind. `jobs` is in priority order; `free` GPUs per kind."""
    left = dict(free)
    plan: dict[str, Counts] = {}
    for job in jobs:
        if not any(left.values()):
            break
        kind = first_kind(job, left)
        if kind is None or left.get(kind, 0) <= 0:
            continue
        plan[job.name] = {kind: 1}
        left[kind] -= 1
    by_name = {j.name: j for j in jobs}
    heap: list[tuple[float, int, str, str]] = []
    order = {j.name: i for i, j in enumerate(jobs)}

    def push(name: str) -> None:
        job, counts = by_name[name], plan[name]
        if sum(counts.values()) >= max_gpus(job):
            return
        for kind, n in left.items():
            if n > 0:
                s = score(job, counts, kind)
                if s > 0:
                    heapq.heappush(heap, (-s, order[name], name, kind))

    for name in plan:
        push(name)
    while heap and any(left.values()):
        _, _, name, kind = heapq.heappop(heap)
        if left.get(kind, 0) <= 0:
            continue
        plan[name][kind] = plan[name].get(kind, 0) + 1
        left[kind] -= 1
        # the job's other entries were scored for its old counts: drop and rescore them
        heap = [e for e in heap if e[2] != name]
        heapq.heapify(heap)
        push(name)
    return plan
