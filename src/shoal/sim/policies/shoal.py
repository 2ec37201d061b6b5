"""shoal's own policy: heterogeneity-, elasticity-, spot- and cost-aware goodput scheduling.

It re-plans every tick like Pollux, but:
- heterogeneity-aware: it plans per GPU kind with each kind's measured speed for the job's
  application, so a kind goes to the jobs it speeds up most (comparative advantage), and it
  splits each job's batch across kinds in proportion to speed;
- cost-aware: a GPU (or a bundle of them) goes to a job only if it lowers the job's cost x time
  (`cost_time_falls`), with the GPUs priced at the tier they would be billed at (spot while it
  has room, then on-demand), and only while it returns at least `min_marginal` of its nominal
  speed as goodput, so GPUs past the knee of a job's scaling curve stay unbilled;
- spot-aware: elastic jobs fill spot nodes first (a revocation only shrinks them); gangs go on
  on-demand nodes first (a revocation would restart them from a checkpoint);
- it favours jobs with little attained service (a least-attained-service weight, as Tiresias),
  which needs no knowledge of job length, and rescales elastic jobs in place;
- GPUs nobody wants one at a time (an idle cluster) go out in bundles that may span many nodes,
  chosen from the job's own speedup curve by the same cost x time rule: a curve that dips at a
  node boundary and recovers nodes later is crossed when the recovery pays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shoal.control.batch import best_batch, nodes_needed, unit_goodput
from shoal.control.tiers import marginal_price, tier_order
from shoal.perf.devices import load_devices
from shoal.sim.jobs import JobRun
from shoal.sim.policies.common import gpus_per_node, place_gang, retune
from shoal.sim.policies.fill import waterfill
from shoal.sim.policy import ClusterView, Decision


@dataclass
class ShoalPolicy:
    min_change: float = 0.1  # resize a running job only if its planned speedup moves this much
    min_marginal: float = 0.05  # a GPU must add this fraction of its nominal speed as goodput
    las_scale_gpu_s: float = 3600.0  # attained service at which a job's weight halves
    # an extra price weight in the ranking (marginal goodput / price ** this); 0: price enters
    # only through the cost x time rule (0.3 put cheap slow GPUs ahead of dear fast ones on mixed
    # spot clusters: docs/notes/sim-fidelity.md, section 8)
    price_exponent: float = 0.0
    max_gpus_per_job: int = 64
    lookahead: int = 64  # the largest bundle; past one node a bundle fills whole nodes (fill.py)
    name: str = "shoal"
    periodic: bool = True
    inplace_rescale: bool = True

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        # least attained service first, discretised into doubling levels (as Tiresias does) so
        # that jobs with similar service keep arrival order instead of swapping GPUs every tick
        jobs = sorted(
            view.running + view.pending,
            key=lambda j: (self._level(j.gpu_s), j.spec.arrival_s, j.name),
        )
        decisions: dict[str, Decision] = {}
        # gangs first: running ones keep their GPUs, pending ones start on on-demand first
        for job in jobs:
            if not job.spec.elastic and not job.running:
                decision = place_gang(view, job, tiers=tier_order(elastic=False))
                if decision is not None:
                    decisions[job.name] = decision
        elastic = [j for j in jobs if j.spec.elastic]
        # re-plan every elastic job from scratch over the GPUs the gangs leave
        for job in elastic:
            view.release(job.alloc)
        free, spot_free = _room(view)
        per_node = gpus_per_node(view)

        def room(kind: str, left: dict[str, int]) -> int:
            """Spot GPUs of `kind` still free as the fill hands GPUs out (spot fills first)."""
            return max(0, spot_free.get(kind, 0) - (free[kind] - left[kind]))

        rates: dict[tuple, float] = {}  # a job's progress is fixed within a round

        def rate(job: JobRun, counts: dict[str, int]) -> float:
            key = (job.name, *sorted(counts.items()))
            if key not in rates:
                nodes = nodes_needed(counts, per_node)
                rates[key] = best_batch(job.spec.app, counts, nodes, job.progress)[1]
            return rates[key]

        def held_usd(counts: dict[str, int], left: dict[str, int]) -> float:
            """USD per hour of a job's GPUs so far in the fill, each kind's at the mean price of
            the GPUs of that kind handed out (spot first)."""
            usd = 0.0
            for kind, n in counts.items():
                out = free[kind] - left[kind]
                spot = min(out, spot_free.get(kind, 0))
                mean = spot * marginal_price(kind, 1) + (out - spot) * marginal_price(kind, 0)
                usd += n * mean / max(out, 1)
            return usd

        plan = waterfill(
            elastic,
            free,
            lambda job, left: self._first_kind(job, left, {k: room(k, left) for k in left}),
            lambda job, counts, kind, left: self._score(
                job, counts, kind, rate, room(kind, left), 1, held_usd(counts, left)
            ),
            lambda j: self.max_gpus_per_job,
            lookahead=self.lookahead,
            bundle_score=lambda job, counts, kind, d, left: self._score(
                job, counts, kind, rate, room(kind, left), d, held_usd(counts, left)
            ),
            per_node=per_node,
        )
        # keep running jobs whose plan barely changes their speed (a rescale is not free)
        keep = []
        for job in elastic:
            counts = plan.get(job.name, {})
            if job.running and counts:
                ratio = rate(job, counts) / max(rate(job, dict(job.counts)), 1e-12)
                if counts == dict(job.counts) or abs(ratio - 1.0) < self.min_change:
                    keep.append(job)
        for job in keep:
            view.take(job.alloc)
            retune(job, decisions)
        kept = {j.name for j in keep}
        for job in elastic:
            if job.name not in kept:
                self._place(view, job, plan.get(job.name, {}), decisions)
        return decisions

    def _first_kind(self, job: JobRun, left: dict[str, int], spot_free: dict[str, int]):
        options = [k for k, n in left.items() if n > 0]
        if not options:
            return None
        devices = load_devices()
        return max(
            options,
            key=lambda k: (
                devices.app_speed(k, job.spec.app)
                / marginal_price(k, spot_free.get(k, 0)) ** self.price_exponent
            ),
        )

    def _score(
        self,
        job: JobRun,
        counts: dict[str, int],
        kind: str,
        rate,
        spot_room: int,
        d: int = 1,
        held_usd: float = 0.0,
    ) -> float:
        """Value per GPU of `d` more GPUs of `kind`; 0 unless together they return at least
        `min_marginal` of their nominal speed and the last of them does alone (a bundle is gated
        as a whole: the GPU that crosses a node boundary gains little alone, the next ones a
        lot), and unless they lower the job's cost x time (`held_usd`: what the job's GPUs cost
        now)."""
        now = rate(job, counts)
        more = dict(counts)
        more[kind] = more.get(kind, 0) + d
        new = rate(job, more)
        base = unit_goodput(job.spec.app, job.progress)
        speed = load_devices().app_speed(kind, job.spec.app)
        least = self.min_marginal * speed * base
        if new - now < least * d:
            return 0.0
        # the bundle's mean price per GPU: spot while the kind's spot room lasts
        price = sum(marginal_price(kind, spot_room - i) for i in range(d)) / d
        if d > 1:  # ... and its last GPU still pays alone (no useless GPUs ride along)
            more[kind] -= 1
            if new - rate(job, more) < least:
                return 0.0
        if not cost_time_falls(now, new, held_usd, price * d):
            return 0.0
        weight = 1.0 / (1.0 + job.gpu_s / self.las_scale_gpu_s)
        gain = (base / now - base / new) / d
        return weight * gain / price**self.price_exponent

    def _place(
        self, view: ClusterView, job: JobRun, plan: dict[str, int], decisions: dict[str, Decision]
    ) -> None:
        alloc: dict[int, int] = {}
        for kind, n in plan.items():
            for node_id, k in self._pack(view, kind, n).items():
                alloc[node_id] = alloc.get(node_id, 0) + k
        if alloc or job.running:
            batch = None
            if alloc:
                counts: dict[str, int] = {}
                for node_id, k in alloc.items():
                    kind = view.node(node_id).kind
                    counts[kind] = counts.get(kind, 0) + k
                batch = best_batch(job.spec.app, counts, len(alloc), job.progress)[0]
            decisions[job.name] = Decision(alloc, batch)

    def _pack(self, view: ClusterView, kind: str, n: int) -> dict[int, int]:
        # whole on spot if it fits, else whole on any tier (consolidated: fewer nodes means
        # cheaper synchronisation), else spot first and the rest on-demand
        got = view.pack(n, view.nodes_of(kind, "spot")) or view.pack(n, view.nodes_of(kind))
        if got is None:
            got = {}
            for tier in tier_order(elastic=True):
                part = view.pack(min(n, self._free(view, kind, tier)), view.nodes_of(kind, tier))
                for node_id, k in (part or {}).items():
                    got[node_id] = got.get(node_id, 0) + k
                    n -= k
        return got

    def _level(self, gpu_s: float) -> int:
        return int(math.log2(1.0 + gpu_s / self.las_scale_gpu_s))

    @staticmethod
    def _free(view: ClusterView, kind: str, tier: str) -> int:
        return sum(view.free[i] for i in view.nodes_of(kind, tier))


def cost_time_falls(rate: float, new_rate: float, usd_per_hour: float, added_usd: float) -> bool:
    """Whether GPUs costing `added_usd` per hour, which move a job's goodput from `rate` to
    `new_rate`, lower the product of its cost and its time to finish.

    With W work left, the job finishes in W / rate and pays usd_per_hour x W / rate, so the
    product is W^2 usd_per_hour / rate^2 and the GPUs pay iff (new_rate / rate)^2 exceeds the
    ratio of the new to the old price per hour. To first order: the fraction of time they save
    is at least the fraction of cost they add, i.e. they return, per dollar, at least half the
    goodput per dollar of the GPUs the job holds. Relative time and relative cost count alike,
    so the rule needs no exchange rate between hours and dollars: it is the same on a cheap
    cluster and a dear one, on spot and on-demand, and a GPU on a dearer tier must earn more.
    """
    return new_rate * new_rate * usd_per_hour > rate * rate * (usd_per_hour + added_usd)


def _room(view: ClusterView) -> tuple[dict[str, int], dict[str, int]]:
    """Free GPUs per kind, and how many of those are on spot nodes."""
    free: dict[str, int] = {}
    spot_free: dict[str, int] = {}
    for node_id, n in view.free.items():
        node = view.node(node_id)
        free[node.kind] = free.get(node.kind, 0) + n
        if node.tier == "spot":
            spot_free[node.kind] = spot_free.get(node.kind, 0) + n
    return free, spot_free
