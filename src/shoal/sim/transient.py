"""The transient-server experiment of Li et al. (ICAC'19), replayed from its measured inputs.

ResNet-32 on CIFAR-10 trains for 64,000 steps with asynchronous parameter-server SGD on
preemptible workers (the first is the chief, which checkpoints) and on-demand parameter servers.
Each spot worker draws a lifetime from the measured lifetimes of preemptible VMs of its kind
(`shoal.cluster.revocation.load_gce_lifetimes`; per kind and region with `by_region`). A revoked
worker is not replaced and training goes on with the rest (the paper's harness); a revoked
chief or parameter server fails the run, as in the paper, whose averages cover completed runs.
Billing is per second (`shoal.cluster.ledger`): each server at its own price until its
revocation or the end.

Two ways to say how fast the cluster steps:
- `ClusterConfig`: a heterogeneous, multi-region cluster (`shoal.sim.transient_spec`) whose
  step rate, recomputed at every revocation, comes from the parameter-server model fitted to
  the paper's measurements (`shoal.sim.transient_model`).
- `TransientConfig`: N K80 workers, each stepping at one measured rate x `worker_efficiency`
  (the first version of this replay, kept for its bench): k alive workers step k times faster.
"""

from __future__ import annotations

import csv
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from shoal.cluster.ledger import CostLedger
from shoal.cluster.revocation import EmpiricalLifetimes, RevocationModel, load_gce_lifetimes
from shoal.perf.devices import load_devices
from shoal.sim.transient_data import TOTAL_STEPS, regional_lifetimes
from shoal.sim.transient_model import PSModel
from shoal.sim.transient_spec import PS_PRICES_USD_PER_HOUR, Server, TransientCluster

PS_PRICE_USD_PER_HOUR = PS_PRICES_USD_PER_HOUR["on_demand"]  # 4-vCPU server (paper Table I)


def _durations(*parts: str) -> list[float]:
    path = resources.files("shoal.data").joinpath("transient", "training", *parts)
    with path.open() as fh:
        return [float(row["Duration"]) for row in csv.DictReader(fh)]


def single_gpu_step_rate() -> float:
    """Steps/s of one on-demand K80 alone, from the paper's 10 baseline runs."""
    return TOTAL_STEPS / statistics.mean(
        _durations("k80_on_demand", "k80-demand", "train_data_processed.csv")
    )


def on_demand_efficiency(num_workers: int) -> float:
    """Per-worker scaling efficiency of on-demand N-K80 runs (a separate measurement)."""
    runs = _durations("k80_on_demand", f"{num_workers}-demand", "train_data_processed.csv")
    return TOTAL_STEPS / statistics.mean(runs) / num_workers / single_gpu_step_rate()


@dataclass(frozen=True)
class TransientConfig:
    num_workers: int
    step_rate_per_worker: float
    worker_efficiency: float = 1.0
    worker_price_usd_per_hour: float = 0.0  # 0: the device table's K80 spot price
    ps_price_usd_per_hour: float = PS_PRICE_USD_PER_HOUR
    total_steps: int = TOTAL_STEPS

    def __post_init__(self) -> None:
        if self.num_workers < 1 or self.step_rate_per_worker <= 0:
            raise ValueError("need >= 1 worker and a positive step rate")
        if not 0 < self.worker_efficiency <= 1:
            raise ValueError("worker_efficiency must be in (0, 1]")


@dataclass(frozen=True)
class TransientRun:
    duration_s: float
    cost_usd: float
    revoked: int  # workers revoked while training (a parameter server's loss is `failed`)
    failed: bool  # the chief or a parameter server was revoked


def _replay(
    deaths: Sequence[float],
    prices: Sequence[float],
    labels: Sequence[Hashable],
    rate: Callable[[Counter[Hashable]], float],
    total_steps: int,
    fatal: Sequence[bool],
    num_workers: int,
) -> TransientRun:
    """Walk revocations in time order; `rate(alive)` is the cluster's steps/s with `alive[label]`
    servers of each label alive (a count per label, not a list of servers: a revocation costs
    the same in a cluster of 10,000 servers as in one of 10).

    Server i dies at deaths[i] and is billed at prices[i] until then; a `fatal` server's death
    (the chief, a parameter server) fails the run. Others leave and the rest go on. The first
    `num_workers` servers are the workers: only their revocations count as revoked workers.
    """
    ledger = CostLedger()
    for i, price in enumerate(prices):
        ledger.open(f"server-{i}", "job", price, 0.0)
    now, steps, alive, revoked = 0.0, 0.0, Counter(labels), 0
    for t, i in sorted((t, i) for i, t in enumerate(deaths)):
        speed = rate(alive)
        finish = now + (total_steps - steps) / speed
        if t >= finish:
            break
        steps += speed * (t - now)
        now = t
        alive[labels[i]] -= 1
        ledger.close(f"server-{i}", now)
        if i < num_workers:
            revoked += 1
        if fatal[i]:  # the paper's harness stops the cluster, the run fails
            ledger.close_all(now)
            return TransientRun(now, ledger.total_usd, revoked, failed=True)
    now += (total_steps - steps) / rate(alive)
    ledger.close_all(now)
    return TransientRun(now, ledger.total_usd, revoked, failed=False)


def run_once(cfg: TransientConfig, lifetimes: RevocationModel, rng: random.Random) -> TransientRun:
    price = cfg.worker_price_usd_per_hour or load_devices().kind("k80").price_usd_per_hour["spot"]
    n = cfg.num_workers
    deaths = [lifetimes.sample_lifetime_s("k80", rng) for _ in range(n)] + [math.inf]
    per_worker = cfg.step_rate_per_worker * cfg.worker_efficiency
    return _replay(
        deaths,
        [price] * n + [cfg.ps_price_usd_per_hour],
        ["worker"] * n + ["ps"],
        lambda alive: per_worker * alive["worker"],
        cfg.total_steps,
        [True] + [False] * (n - 1) + [True],
        n,
    )


@dataclass(frozen=True)
class ClusterConfig:
    cluster: TransientCluster
    model: PSModel
    total_steps: int = TOTAL_STEPS
    by_region: bool = False  # lifetimes per kind and region where measured

    def __post_init__(self) -> None:
        for w in self.cluster.workers:
            self.model.compute(w.kind)  # a UserError now, not mid-run


@cache
def _by_kind() -> EmpiricalLifetimes:
    return load_gce_lifetimes()


@cache
def _regional() -> EmpiricalLifetimes:
    table = {f"{k}@{r}": v for (k, r), v in regional_lifetimes().items()}
    return EmpiricalLifetimes(table, pool_unmeasured=False)


def _lifetime(server: Server, by_region: bool, rng: random.Random) -> float:
    if server.tier == "on_demand":
        return math.inf
    if by_region and (server.kind, server.region) in regional_lifetimes():
        return _regional().sample_lifetime_s(f"{server.kind}@{server.region}", rng)
    # a spot parameter server draws from all measured GPU VMs pooled
    return _by_kind().sample_lifetime_s(server.kind, rng)


def run_cluster_once(cfg: ClusterConfig, rng: random.Random) -> TransientRun:
    """One run of `cfg.cluster` with lifetimes drawn from `rng` (workers first, then servers)."""
    workers, servers = cfg.cluster.workers, cfg.cluster.servers
    everyone = workers + servers
    deaths = [_lifetime(s, cfg.by_region, rng) for s in everyone]
    num_ps = len(servers)
    labels = [w.kind for w in workers] + [None] * num_ps  # alive workers per kind
    rates: dict[tuple[tuple[str, int], ...], float] = {}

    def rate(alive: Counter[Hashable]) -> float:
        key = tuple(sorted((k, n) for k, n in alive.items() if k is not None and n > 0))
        if key not in rates:
            rates[key] = cfg.model.steps_per_s_by_kind(dict(key), num_ps)
        return rates[key]

    fatal = [True] + [False] * (len(workers) - 1) + [True] * num_ps
    prices = [s.price_usd_per_hour for s in everyone]
    return _replay(deaths, prices, labels, rate, cfg.total_steps, fatal, len(workers))


@dataclass(frozen=True)
class TransientSummary:
    num_workers: int
    runs: int
    completed: int
    mean_hours: float
    sd_hours: float
    mean_cost_usd: float
    sd_cost_usd: float
    revoked: int  # worker revocations over all runs
    servers: int  # runs x workers: what `revoked` is out of


def _summarise(num_workers: int, results: list[TransientRun]) -> TransientSummary:
    done = [r for r in results if not r.failed]
    hours = [r.duration_s / 3600 for r in done] or [math.nan]
    costs = [r.cost_usd for r in done] or [math.nan]
    return TransientSummary(
        num_workers=num_workers,
        runs=len(results),
        completed=len(done),
        mean_hours=statistics.mean(hours),
        sd_hours=statistics.stdev(hours) if len(hours) > 1 else 0.0,
        mean_cost_usd=statistics.mean(costs),
        sd_cost_usd=statistics.stdev(costs) if len(costs) > 1 else 0.0,
        revoked=sum(r.revoked for r in results),
        servers=len(results) * num_workers,
    )


def replicate(cfg: TransientConfig, runs: int, seed: int) -> TransientSummary:
    """`runs` independent runs (one RNG per run, seeded by (seed, run index))."""
    lifetimes = load_gce_lifetimes()
    results = [
        run_once(cfg, lifetimes, random.Random(f"{seed}-{cfg.num_workers}-{i}"))
        for i in range(runs)
    ]
    return _summarise(cfg.num_workers, results)


def replicate_cluster(cfg: ClusterConfig, runs: int, seed: int) -> TransientSummary:
    """`runs` independent runs of a cluster (one RNG per run, seeded by (seed, run index))."""
    n = len(cfg.cluster.workers)
    results = [run_cluster_once(cfg, random.Random(f"{seed}-{n}-{i}")) for i in range(runs)]
    return _summarise(n, results)
