"""Greedy water-filling of GPUs over jobs, the core shared by the goodput policies.

Every job first gets one GPU (in priority order, while GPUs last), then GPUs go to the (job,
kind) pair with the highest marginal score until no pair scores above zero. Speedup curves are
not concave: the GPU that makes a job span one more node adds almost nothing (it pays the
cross-node synchronisation) while the next few add a lot, so a one-GPU-at-a-time greedy stops at
every node boundary (a lone ImageNet job stayed on 4 of 64 GPUs). So, if asked, once no single
GPU scores above zero a second pass scores each pair by the best average marginal over a bundle of
1..`lookahead` more GPUs and gives the winner the whole bundle. Where the node sizes are given,
a bundle larger than one node ends on a node boundary (a consolidated job fills the nodes it
spans; the nodes left whole stay whole for others), so a job can reach across many nodes at the
price of one evaluation per node. A job's scores are recomputed only after it gains GPUs (a lazy
max-heap), so a round costs O((jobs + GPUs) x kinds x candidate bundles) evaluations of the
policy's scoring function.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from shoal.sim.jobs import JobRun

Counts = dict[str, int]
# score(job, counts, kind, left) -> marginal value of one more GPU of `kind` (<= 0: do not add);
# `left`: the GPUs per kind not yet handed out
Score = Callable[[JobRun, Counts, str, Counts], float]
# bundle_score(job, counts, kind, d, left) -> value per GPU of d more GPUs of `kind`
BundleScore = Callable[[JobRun, Counts, str, int, Counts], float]


def waterfill(
    jobs: list[JobRun],
    free: Counts,
    first_kind: Callable[[JobRun, Counts], str | None],
    score: Score,
    max_gpus: Callable[[JobRun], int],
    lookahead: int = 1,
    bundle_score: BundleScore | None = None,
    per_node: Counts | None = None,
) -> dict[str, Counts]:
    """Per-job GPU counts by kind. `jobs` is in priority order; `free` GPUs per kind.

    `lookahead` is the largest bundle of the second pass (1: no second pass). 4, one node of
    every cluster preset, lets a job cross one node boundary. A bundle is valued by
    `bundle_score` where given (a policy that gates GPUs by their gain can then gate the bundle
    as a whole), else by the mean of its GPUs' one-at-a-time scores. `per_node` (GPUs per node
    of each kind): bundles of `bundle_score` past one node must end on a node boundary.
    """
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
    order = {j.name: i for i, j in enumerate(jobs)}

    def push(heap: list, name: str, bundle: int) -> None:
        job, counts = by_name[name], plan[name]
        room = max_gpus(job) - sum(counts.values())
        for kind, n in left.items():
            best, total, more = (0.0, 0), 0.0, dict(counts)
            size = per_node.get(kind, bundle) if per_node else bundle
            for d in range(1, min(bundle, n, room) + 1):
                if bundle_score is None or d == 1:
                    total += score(job, more, kind, left)
                    more[kind] = more.get(kind, 0) + 1
                    value = total / d
                elif d > size and (counts.get(kind, 0) + d) % size:
                    continue  # past one node, only bundles that fill their last node
                else:
                    value = bundle_score(job, counts, kind, d, left)
                if value > best[0]:
                    best = (value, d)
            if best[1]:
                heapq.heappush(heap, (-best[0], order[name], name, kind, best[1]))

    # one GPU at a time first; bundles only for the GPUs nobody wants one at a time, so a
    # contended cluster is shared exactly as before and only idle GPUs cross node boundaries
    for bundle in (1, lookahead) if lookahead > 1 else (1,):
        heap: list[tuple[float, int, str, str, int]] = []
        for name in plan:
            push(heap, name, bundle)
        while heap and any(left.values()):
            _, _, name, kind, d = heapq.heappop(heap)
            if left.get(kind, 0) <= 0:
                continue
            if d <= left[kind]:
                plan[name][kind] = plan[name].get(kind, 0) + d
                left[kind] -= d
            # the job's other entries were scored for its old counts, or for a bundle larger
            # than what is left: drop and rescore them
            heap = [e for e in heap if e[2] != name]
            heapq.heapify(heap)
            push(heap, name, bundle)
    return plan
