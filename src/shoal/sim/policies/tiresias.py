"""Tiresias: discretised two-dimensional least-attained-service (2D-LAS) gang scheduling.

A job's attained service is GPUs x time it has run. Queues split jobs by attained service
(`thresholds_gpu_s`); a lower queue always goes first and jobs within a queue go in arrival order.
Each round the policy admits jobs in that order while their gangs fit the cluster's capacity and
preempts running jobs that fall outside the admitted set (they resume later, from a checkpoint
taken at preemption, paying the restart overhead). Gangs keep their requested size and batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.sim.policies.common import kinds_by_speed, place_gang
from shoal.sim.policy import ClusterView, Decision


@dataclass
class TiresiasPolicy:
    # Two queues, as Tiresias' default; the threshold is 16 GPU-hours of attained service (the
    # setting we recall from Pollux's simulator, whose Tiresias baseline we validate against).
    thresholds_gpu_s: tuple[float, ...] = (16 * 3600.0,)
    name: str = "tiresias"
    periodic: bool = True
    inplace_rescale: bool = False
    gangs_only: bool = True

    def _queue(self, gpu_s: float) -> int:
        return sum(gpu_s >= t for t in self.thresholds_gpu_s)

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        jobs = sorted(
            view.running + view.pending,
            key=lambda j: (self._queue(j.gpu_s), j.spec.arrival_s, j.name),
        )
        # pass 1: who is admitted, by capacity per kind (placement comes after)
        room = {k: view.capacity(k) for k in view.kinds()}
        largest = max(room.values(), default=0)
        admitted = set()
        for job in jobs:
            options = [job.spec.preferred_kind] if job.spec.preferred_kind else None
            if job.running:
                options = [job.counts[0][0]] if len(job.counts) == 1 else list(dict(job.counts))
            need = job.spec.requested_gpus
            for kind in options or kinds_by_speed(view, job.spec.app):
                if room.get(kind, 0) >= need:
                    room[kind] -= need
                    admitted.add(job.name)
                    break
            else:
                if need > largest and sum(room.values()) >= need:  # a gang spanning kinds
                    for kind in room:
                        take = min(room[kind], need)
                        room[kind] -= take
                        need -= take
                    admitted.add(job.name)
        decisions: dict[str, Decision] = {}
        for job in view.running:
            if job.name not in admitted:
                view.release(job.alloc)
                decisions[job.name] = Decision({})
        # pass 2: place newly admitted jobs; fragmentation may still leave one waiting
        for job in jobs:
            if job.name in admitted and not job.running:
                decision = place_gang(view, job)
                if decision is not None:
                    decisions[job.name] = decision
        return decisions
