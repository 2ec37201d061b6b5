"""The transient-server experiment of Li et al. (ICAC'19), replayed from its measured inputs.

ResNet-32 on CIFAR-10 trains for 64,000 steps with asynchronous parameter-server SGD on N
preemptible K80 workers (one of them the chief, which checkpoints) and one on-demand parameter
server. Inputs, and only these: the single-K80 step rate measured by the paper's on-demand runs
(`k80_on_demand/k80-demand`, 64,000 steps / mean duration) and the measured lifetimes of
preemptible K80 VMs (`shoal.cluster.revocation.load_gce_lifetimes`). Each worker draws a lifetime;
while k workers are alive training advances at k x the single-GPU rate x `worker_efficiency`
(1.0 = perfect async scaling). A revoked worker is not replaced and training goes on (the paper's
harness); a revoked chief fails the run, as in the paper, whose averages cover completed runs.
Billing is per second (`shoal.cluster.ledger`): workers until their revocation or the end, the
parameter server until the end.
"""

from __future__ import annotations

import csv
import random
import statistics
from dataclasses import dataclass
from importlib import resources

from shoal.cluster.ledger import CostLedger
from shoal.cluster.revocation import RevocationModel, load_gce_lifetimes
from shoal.perf.devices import load_devices

TOTAL_STEPS = 64000
PS_PRICE_USD_PER_HOUR = 0.143  # 4-vCPU parameter server, on-demand (paper Table I)


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
    revoked: int  # workers revoked while training
    failed: bool  # the chief was revoked


def run_once(cfg: TransientConfig, lifetimes: RevocationModel, rng: random.Random) -> TransientRun:
    price = cfg.worker_price_usd_per_hour or load_devices().kind("k80").price_usd_per_hour["spot"]
    ledger = CostLedger()
    deaths = [lifetimes.sample_lifetime_s("k80", rng) for _ in range(cfg.num_workers)]
    for i in range(cfg.num_workers):
        ledger.open(f"worker-{i}", "job", price, 0.0)
    ledger.open("ps", "job", cfg.ps_price_usd_per_hour, 0.0)
    rate = cfg.step_rate_per_worker * cfg.worker_efficiency
    now, steps, alive, revoked = 0.0, 0.0, set(range(cfg.num_workers)), 0
    # walk through revocations in time order until the steps are done or the chief dies
    for t, i in sorted((t, i) for i, t in enumerate(deaths)):
        finish = now + (cfg.total_steps - steps) / (rate * len(alive))
        if t >= finish:
            break
        steps += rate * len(alive) * (t - now)
        now = t
        alive.discard(i)
        ledger.close(f"worker-{i}", now)
        revoked += 1
        if i == 0:  # the chief: the paper's harness stops the cluster, the run fails
            ledger.close_all(now)
            return TransientRun(now, ledger.total_usd, revoked, failed=True)
    now += (cfg.total_steps - steps) / (rate * len(alive))
    ledger.close_all(now)
    return TransientRun(now, ledger.total_usd, revoked, failed=False)


@dataclass(frozen=True)
class TransientSummary:
    num_workers: int
    runs: int
    completed: int
    mean_hours: float
    sd_hours: float
    mean_cost_usd: float
    sd_cost_usd: float
    revoked: int
    servers: int


def replicate(cfg: TransientConfig, runs: int, seed: int) -> TransientSummary:
    """`runs` independent runs (one RNG per run, seeded by (seed, run index))."""
    lifetimes = load_gce_lifetimes()
    results = [
        run_once(cfg, lifetimes, random.Random(f"{seed}-{cfg.num_workers}-{i}"))
        for i in range(runs)
    ]
    done = [r for r in results if not r.failed]
    hours = [r.duration_s / 3600 for r in done]
    costs = [r.cost_usd for r in done]
    return TransientSummary(
        num_workers=cfg.num_workers,
        runs=runs,
        completed=len(done),
        mean_hours=statistics.mean(hours),
        sd_hours=statistics.stdev(hours) if len(hours) > 1 else 0.0,
        mean_cost_usd=statistics.mean(costs),
        sd_cost_usd=statistics.stdev(costs) if len(costs) > 1 else 0.0,
        revoked=sum(r.revoked for r in results),
        servers=runs * cfg.num_workers,
    )
