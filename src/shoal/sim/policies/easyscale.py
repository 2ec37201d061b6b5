"""EasyScale's inter-job scheduler (SC'23), homogeneous and heterogeneous variants.

A job is a fixed number P of EasyScale threads (its requested GPUs) that run on any number of
GPUs up to P; its speed is set by the best whole-thread split (the step-time model's split,
`perf.step_time.units_speed`). The policy never shrinks or preempts a running job. Each round:
1. every running job proposes, per GPU kind, its best increment: d more GPUs of that kind, total
   at most min(2 x current, P), no slower than now and with at most `max_waste` of the
   allocation's compute idled by whole-thread rounding, scored by marginal speedup per GPU,
   `((new/current) - 1) / d + 1`;
2. pending jobs, first come first served, start on their smallest proposal, one GPU (the fastest
   kind that has room, or only the preferred kind when homogeneous) if one is free;
3. increments from all jobs are granted best score first while GPUs of that kind remain, at most
   one per job per round. (We try increments of 1, 2, 4, ... GPUs rather than every multiset.)
The homogeneous variant only ever uses each job's preferred kind (its fastest kind if it names
none); the heterogeneous one may mix kinds. Our waste counts uneven splits on one kind too,
which EasyScale's `waste()` reports as zero.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.perf.goodput import goodput_model
from shoal.sim.jobs import JobRun
from shoal.sim.policies.common import grow, kinds_by_speed, place_gang
from shoal.sim.policy import ClusterView, Decision


@dataclass
class EasyScalePolicy:
    heterogeneous: bool = True
    max_waste: float = 0.30
    periodic: bool = True
    quiesce: bool = True  # its plan reads placements and free GPUs only: events move it
    inplace_rescale: bool = True

    @property
    def name(self) -> str:
        return "easyscale-heter" if self.heterogeneous else "easyscale-homo"

    def _kinds(self, view: ClusterView, job: JobRun) -> list[str]:
        fastest = kinds_by_speed(view, job.spec.app)
        if self.heterogeneous and job.spec.mixed_kinds_ok:
            return fastest
        return [job.spec.preferred_kind or fastest[0]]

    def _speed(self, job: JobRun, counts: dict[str, int], nodes: int) -> float:
        """Steps per second. At a fixed batch the gain per step cancels out of every ratio."""
        model = goodput_model(job.spec.app)
        key = tuple(sorted((k, n) for k, n in counts.items() if n))
        return 1.0 / model.step_time_s(key, nodes, job.spec.batch_size, job.spec.requested_gpus)

    def _waste(self, job: JobRun, counts: dict[str, int]) -> float:
        model = goodput_model(job.spec.app)
        key = tuple(sorted((k, n) for k, n in counts.items() if n))
        ideal = model.effective_gpus(key)
        return 1.0 - model.effective_gpus(key, job.spec.requested_gpus) / ideal

    def _best_increment(
        self,
        view: ClusterView,
        job: JobRun,
        counts: dict[str, int],
        kind: str,
        limit: int,
        now_rate: float,
    ) -> tuple[float, int] | None:
        best = None
        for d in _steps(limit):
            new = dict(counts)
            new[kind] = new.get(kind, 0) + d
            if self._waste(job, new) > self.max_waste:
                continue
            extra = grow(view, job, kind, d, take=False)
            if extra is None:
                continue
            rate = self._speed(job, new, len(set(job.alloc) | set(extra)))
            if rate < now_rate:
                continue
            score = (rate / now_rate - 1.0) / d + 1.0
            if best is None or score > best[0]:
                best = (score, d)
        return best

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        decisions: dict[str, Decision] = {}
        free_by_kind: dict[str, int] = {}
        for node_id, n in view.free.items():
            kind = view.node(node_id).kind
            free_by_kind[kind] = free_by_kind.get(kind, 0) + n
        if not any(free_by_kind.values()):
            return decisions
        increments = []
        for job in view.running:
            if not job.spec.elastic or job.gpus >= job.spec.requested_gpus:
                continue
            cur = job.num_gpus
            cap = min(2 * cur, job.spec.requested_gpus)
            if cap <= cur:
                continue
            memo = job.data.setdefault("easyscale", {})
            for kind in self._kinds(view, job):
                limit = min(cap - cur, free_by_kind.get(kind, 0))
                # a job's proposals depend only on its placement and the room left
                own_free = tuple(view.free.get(i, 0) for i in job.alloc)
                memo_key = (job.counts, job.num_nodes, kind, limit, own_free)
                if memo_key not in memo:
                    counts = dict(job.counts)
                    now_rate = self._speed(job, counts, job.num_nodes)
                    memo[memo_key] = self._best_increment(view, job, counts, kind, limit, now_rate)
                best = memo[memo_key]
                if best is not None:
                    increments.append((best[0], job.spec.arrival_s, job.name, kind, best[1]))
        for job in view.pending:
            if not view.free_gpus:
                break
            if not job.spec.elastic:
                decision = place_gang(view, job)
                if decision is not None:
                    decisions[job.name] = decision
                continue
            for kind in self._kinds(view, job):
                alloc = view.pack(1, view.nodes_of(kind))
                if alloc is not None:
                    decisions[job.name] = Decision(alloc, parallelism=job.spec.requested_gpus)
                    break
        running = {j.name: j for j in view.running} if increments else {}
        increments.sort(key=lambda x: (-x[0], x[1]))
        for _, _, name, kind, d in increments:
            if name in decisions:
                continue
            extra = grow(view, running[name], kind, d)
            if extra is None:
                continue
            alloc = dict(running[name].alloc)
            for node_id, n in extra.items():
                alloc[node_id] = alloc.get(node_id, 0) + n
            decisions[name] = Decision(alloc, parallelism=running[name].spec.requested_gpus)
        return decisions


def _steps(limit: int) -> list[int]:
    """Increment sizes tried: powers of two up to `limit`, and `limit` itself.

    EasyScale enumerates every GPU multiset; trying doublings keeps a round O(log P) per kind
    and still reaches any size within a few rounds.
    """
    steps, d = [], 1
    while d < limit:
        steps.append(d)
        d *= 2
    return steps + [limit] if limit >= 1 else steps
