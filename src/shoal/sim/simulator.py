"""The discrete-event core: arrivals, completions, revocations and scheduling rounds on a heap.

Time only jumps between events. Events are (time, sequence, action, argument) tuples on a heap;
a job's completion event carries the job's `version` and is ignored once the job's rate has
changed. Scheduling rounds run on tick boundaries (`SimConfig.tick_s`): an event marks the
cluster dirty and asks for a round at the next tick; a periodic policy also gets a round every
tick while jobs are active. Between rounds a job advances at a constant rate; its rate is
re-evaluated at `SimConfig.refresh_points` milestones of its progress because statistical
efficiency changes as training goes on, and each constant rate is the one that covers its
stretch of progress in the true time (`GoodputModel.segment_rate`). The core knows nothing about
any particular policy.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from shoal.cluster.ledger import CostLedger
from shoal.cluster.nodes import ClusterSpec
from shoal.cluster.revocation import NoRevocations, RevocationModel
from shoal.errors import UserError
from shoal.perf.devices import load_devices
from shoal.perf.goodput import goodput_model
from shoal.sim.jobs import JobRun, JobSpec
from shoal.sim.policy import ClusterView, Decision, Node, Policy, counts_of

_ARRIVE, _DONE, _REVOKE, _REPLACE, _ROUND, _REFRESH = range(6)
MAX_TIME_S = 365 * 86400.0  # the horizon: a simulation stops there, finished or not
MAX_TICK_S = 86_400.0  # a scheduling interval of a day (see SimConfig)
MAX_STALL_S = 3_600.0  # a restart or rescale overhead of an hour


@dataclass(frozen=True)
class SimConfig:
    tick_s: float = 60.0  # scheduling interval
    restart_s: float = 30.0  # checkpoint-restart: start, restart, and rescale by restart
    rescale_s: float = 10.0  # in-place rescale of an elastic job
    checkpoint_interval_s: float = 1800.0  # gang jobs lose work since their last checkpoint
    replace_delay_s: float = 300.0  # a revoked spot node is replaced after this long
    refresh_points: int = 10  # rate re-evaluations over a job's progress
    seed: int = 0
    max_time_s: float = MAX_TIME_S

    def __post_init__(self) -> None:
        # Finite, and within bounds generous for real use (Pollux: a 60 s tick, 30 s restarts).
        # NaN was taken (a restart that cost NaN seconds ran); inf never ticked or never ended;
        # a 1e-6 s tick made a round per microsecond of a months-long trace (a hang), a 1e12 s
        # one put its rounds at time 0, before the events asking (negative JCTs); a rescale of
        # a day stalled jobs rescaled again before it ended, a round a tick for a year (~30 min).
        for name, flag, low, high in (
            ("tick_s", "--tick", 1.0, MAX_TICK_S),
            ("restart_s", "--restart-s", 0.0, MAX_STALL_S),
            ("rescale_s", "--rescale-s", 0.0, MAX_STALL_S),
            ("checkpoint_interval_s", "checkpoint_interval_s", 0.0, MAX_TIME_S),
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and low <= value <= high):
                raise UserError(f"{flag} must be from {low:g} to {high:,.0f} s, got {value:g}")
        if self.refresh_points < 1:
            raise ValueError("refresh_points must be >= 1")


@dataclass
class SimResult:
    policy: str
    jobs: list[JobRun]
    nodes: list[Node]
    makespan_s: float
    capacity_gpu_s: float  # sum over nodes of GPUs x time alive, up to the makespan
    timeline: list[tuple[float, int]]  # (time, GPUs in use)
    cost_usd_by_job: dict[str, float]
    events: int
    revoked_nodes: int
    extra: dict = field(default_factory=dict)


class Simulator:
    def __init__(
        self,
        jobs: list[JobSpec],
        cluster: ClusterSpec,
        policy: Policy,
        config: SimConfig | None = None,
        revocations: RevocationModel | None = None,
    ) -> None:
        self.cfg = config or SimConfig()
        self.policy = policy
        self.rng = random.Random(self.cfg.seed)
        self.revocations = revocations or NoRevocations()
        self.kinds = load_devices()
        self.ledger = CostLedger()
        self.heap: list[tuple] = []
        self.seq = 0
        self.events = 0
        self.nodes: list[Node] = []
        self.pending: dict[str, JobRun] = {}
        self.running: dict[str, JobRun] = {}
        self.done: list[JobRun] = []
        self.round_at: float | None = None
        self.in_use = 0
        self.timeline: list[tuple[float, int]] = [(0.0, 0)]
        self.revoked_nodes = 0
        self.node_alive_s: dict[int, tuple[float, float]] = {}
        for group in cluster.groups:
            for _ in range(group.count):
                self._add_node(group.kind, group.tier, group.gpus_per_node, 0.0)
        self.num_jobs = len(jobs)
        ordered = sorted(jobs, key=lambda j: (j.arrival_s, j.name))
        self._check_jobs(ordered, cluster)
        for spec in ordered:
            self._push(spec.arrival_s, _ARRIVE, JobRun(spec))

    def _check_jobs(self, jobs: list[JobSpec], cluster: ClusterSpec) -> None:
        """Jobs that could never finish are errors before any work. A policy that runs every
        job as a gang (`gangs_only`, e.g. YARN-CS, Tiresias) never started one wider than the
        cluster, or than its preferred kind (a gang is placed on that kind only): exit 0 with
        makespan 0 or a year. Jobs are told apart by name (pending, running and billing are
        keyed by it), so a repeated name lost a job."""
        gangs_only = getattr(self.policy, "gangs_only", False)
        by_kind: dict[str, int] = {}
        for g in cluster.groups:
            by_kind[g.kind] = by_kind.get(g.kind, 0) + g.count * g.gpus_per_node
        names: set[str] = set()
        for spec in jobs:
            kind = spec.preferred_kind
            room = by_kind.get(kind, 0) if kind else cluster.num_gpus
            if (gangs_only or not spec.elastic) and spec.requested_gpus > room:
                why = f" ({self.policy.name} runs every job as a gang)" if spec.elastic else ""
                where = f"{kind} GPUs, its preferred kind" if kind else "GPUs"
                raise UserError(
                    f"gang job {spec.name} needs {spec.requested_gpus} GPUs; the cluster has "
                    f"{room} {where}{why}"
                )
            if spec.name in names:
                raise UserError(f"job name {spec.name!r} repeats: each job needs its own")
            names.add(spec.name)

    # -- events --------------------------------------------------------------------------
    def _push(self, t: float, action: int, arg: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, action, arg))

    def _add_node(self, kind: str, tier: str, gpus: int, now: float) -> None:
        node = Node(len(self.nodes), kind, tier, gpus, gpus)
        node.price_usd_per_hour = self.kinds.price(kind, tier)
        if tier == "spot":
            node.revoke_s = now + self.revocations.sample_lifetime_s(kind, self.rng)
            if math.isfinite(node.revoke_s):
                self._push(node.revoke_s, _REVOKE, node.node_id)
        self.nodes.append(node)
        self.node_alive_s[node.node_id] = (now, math.inf)

    def _ask_round(self, now: float) -> None:
        """Ask for a scheduling round at the first tick boundary at or after `now`."""
        nxt = math.ceil(now / self.cfg.tick_s - 1e-9) * self.cfg.tick_s
        if self.round_at is None or nxt < self.round_at:
            self.round_at = nxt
            self._push(nxt, _ROUND, nxt)

    def run(self) -> SimResult:
        total = self.num_jobs
        now = 0.0
        while self.heap and len(self.done) < total:
            now, _, action, arg = heapq.heappop(self.heap)
            if now > self.cfg.max_time_s:
                break
            self.events += 1
            if action == _ARRIVE:
                self.pending[arg.name] = arg
                arg.updated_s = now
                self._ask_round(now)
            elif action == _DONE:
                job, version = arg
                if version == job.version and job.name in self.running:
                    self._finish(job, now)
            elif action == _REFRESH:
                job, version = arg
                if version == job.version and job.name in self.running:
                    job.advance(now)
                    self._set_rate(job, now)
            elif action == _REVOKE:
                self._revoke(arg, now)
            elif action == _REPLACE:
                kind, gpus = arg
                self._add_node(kind, "spot", gpus, now)
                self._ask_round(now)
            elif action == _ROUND and arg == self.round_at:
                self.round_at = None
                self._round(now)
        if len(self.done) < total and now > self.cfg.max_time_s:
            makespan = self.cfg.max_time_s  # stopped at the horizon: billed to it, not beyond
        else:
            makespan = max((j.finish_s or now) for j in self.done) if self.done else now
        self.ledger.close_all(makespan)
        capacity = sum(
            self.nodes[i].num_gpus * max(0.0, min(end, makespan) - start)
            for i, (start, end) in self.node_alive_s.items()
        )
        jobs = self.done + list(self.running.values()) + list(self.pending.values())
        return SimResult(
            policy=self.policy.name,
            jobs=jobs,
            nodes=self.nodes,
            makespan_s=makespan,
            capacity_gpu_s=capacity,
            timeline=self.timeline,
            cost_usd_by_job=dict(self.ledger.usd_by_account),
            events=self.events,
            revoked_nodes=self.revoked_nodes,
        )

    # -- state changes ---------------------------------------------------------------------
    def _round(self, now: float) -> None:
        for job in self.running.values():  # policies read progress and attained service
            job.advance(now)
        pending = sorted(self.pending.values(), key=lambda j: (j.spec.arrival_s, j.name))
        view = ClusterView(now, self.nodes, pending, list(self.running.values()))
        decisions = self.policy.schedule(view)
        jobs = {**self.pending, **self.running}
        # release first, so a plan may move GPUs from one job to another in one round
        for name in decisions:
            self._release(jobs[name], now)
        for name, decision in decisions.items():
            self._assign(jobs[name], decision, now)
        # A periodic policy re-plans every tick. One whose plan moves only with events (it sets
        # quiesce) pauses after a round that changes nothing, until the next arrival,
        # completion or revocation; plans that move with time alone (progress, attained
        # service, age) keep their rounds.
        busy = decisions or not getattr(self.policy, "quiesce", False)
        if self.policy.periodic and busy and (self.pending or self.running):
            self._ask_round(now + self.cfg.tick_s)

    def _bill_key(self, job: JobRun, node_id: int) -> str:
        return f"{job.name}@{node_id}"

    def _release(self, job: JobRun, now: float) -> None:
        job.advance(now)
        for node_id, n in job.alloc.items():
            node = self.nodes[node_id]
            if node.alive:
                node.free += n
            key = self._bill_key(job, node_id)
            if self.ledger.is_open(key):
                self.ledger.close(key, now)
            self.in_use -= n
        job.data["prev_alloc"] = job.alloc
        job.set_alloc({})

    def _assign(self, job: JobRun, decision: Decision, now: float) -> None:
        prev = job.data.pop("prev_alloc", {})
        job.set_alloc({i: n for i, n in decision.alloc.items() if n > 0})
        for node_id, n in job.alloc.items():
            node = self.nodes[node_id]
            assert node.alive and node.free >= n, "allocation exceeds a node's free GPUs"
            node.free -= n
            self.ledger.open(
                self._bill_key(job, node_id), job.name, n * node.price_usd_per_hour, now
            )
            self.in_use += n
        self.timeline.append((now, self.in_use))
        job.batch_size = decision.batch_size or job.spec.batch_size
        job.parallelism = decision.parallelism
        job.counts, job.num_nodes = counts_of(job.alloc, self.nodes)
        if not job.alloc:
            self.running.pop(job.name, None)
            self.pending[job.name] = job
            job.version += 1
            return
        self.pending.pop(job.name, None)
        self.running[job.name] = job
        if job.alloc != prev:
            if prev and self.policy.inplace_rescale and job.spec.elastic:
                stall = self.cfg.rescale_s
            else:
                stall = self.cfg.restart_s
                job.restarts += job.ran_before
            job.resume_s = max(job.resume_s, now + stall)
            job.ckpt_s = job.resume_s
        if job.start_s is None:
            job.start_s = now
        job.ran_before = True
        self._set_rate(job, now)

    def _set_rate(self, job: JobRun, now: float) -> None:
        total = job.spec.total_progress
        step = total / self.cfg.refresh_points
        # the small slack keeps a refresh that lands a hair short from re-firing at once
        job.next_refresh = (math.floor(job.progress / step + 1e-6) + 1) * step
        job.rate = goodput_model(job.spec.app).segment_rate(
            job.counts,
            job.num_nodes,
            job.batch_size,
            job.progress,
            min(job.next_refresh, total),
            job.parallelism,
        )
        job.version += 1
        start = max(now, job.resume_s)
        if job.rate <= 0:
            return
        t_done = start + (total - job.progress) / job.rate
        if job.next_refresh < total:
            t_refresh = start + (job.next_refresh - job.progress) / job.rate
            self._push(t_refresh, _REFRESH, (job, job.version))
        self._push(t_done, _DONE, (job, job.version))

    def _finish(self, job: JobRun, now: float) -> None:
        self._release(job, now)
        job.data.pop("prev_alloc", None)
        job.progress = job.spec.total_progress
        job.finish_s = now
        job.version += 1
        del self.running[job.name]
        self.done.append(job)
        self.timeline.append((now, self.in_use))
        self._ask_round(now)

    def _revoke(self, node_id: int, now: float) -> None:
        node = self.nodes[node_id]
        node.alive = False
        self.revoked_nodes += 1
        self.node_alive_s[node_id] = (self.node_alive_s[node_id][0], now)
        for job in [j for j in self.running.values() if node_id in j.alloc]:
            job.revocations += 1
            job.advance(now)
            self._release(job, now)
            keep = {i: n for i, n in job.data["prev_alloc"].items() if i != node_id}
            if job.spec.elastic and keep:
                # elastic: shrink onto the survivors and go on (no work lost)
                self._assign(job, Decision(keep, job.batch_size, job.parallelism), now)
            else:
                # a gang restarts from its last periodic checkpoint; an elastic job that lost
                # every GPU restarts from the checkpoint it wrote during the revocation notice
                if not job.spec.elastic:
                    lost_s = max(0.0, now - job.ckpt_s) % self.cfg.checkpoint_interval_s
                    lost = min(job.rate * lost_s, job.progress)
                    job.progress -= lost
                    job.lost_progress += lost
                self._assign(job, Decision({}), now)
        self.timeline.append((now, self.in_use))
        self._push(now + self.cfg.replace_delay_s, _REPLACE, (node.kind, node.num_gpus))
        self._ask_round(now)
