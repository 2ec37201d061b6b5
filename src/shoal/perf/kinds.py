"""Per-kind facts the simulator needs beyond the catalog: application speeds and prices.

Pollux measured every application profile on T4 GPUs; Gavel measured K80, P100 and V100. The two
are joined through workloads measured in both (ResNet-18/CIFAR-10 at batch 128 and
ResNet-50/ImageNet at batch 64, `data/sim/kinds.json` `t4_anchor`): the V100/T4 speed ratio is the
geometric mean of Gavel's V100 steps/s times Pollux's T4 seconds/step over those pairs. A kind's
speed for an application, in T4 units, is then Gavel's steps/s of the application's stand-in
workload on that kind over V100's, times the V100/T4 ratio; an application with no same-model
Gavel workload uses the catalog's geometric-mean speed of the kind over V100's instead (Gavel's
recommendation model, the nearest to NCF, runs slower on V100 than on K80, so a loose stand-in
would mislead). Prices come from the catalog
(`devices.json`) or, for kinds the catalog lacks (T4), from `kinds.json`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

from shoal.errors import UserError
from shoal.perf.catalog import load_catalog
from shoal.perf.profiles import APPS, PROFILE_KIND, load_profile

TIERS = ("on_demand", "spot")


@dataclass(frozen=True)
class KindTable:
    speed: dict[tuple[str, str], float]  # (kind, app) -> steps/s relative to one T4
    price_usd_per_hour: dict[tuple[str, str], float]  # (kind, tier) -> USD per GPU-hour
    memory_gib: dict[str, float]

    @property
    def kinds(self) -> list[str]:
        return sorted(self.memory_gib)

    def check(self, kind: str) -> str:
        kind = kind.lower()
        if kind not in self.memory_gib:
            raise UserError(f"unknown GPU kind {kind!r} (known: {', '.join(self.kinds)})")
        return kind

    def app_speed(self, kind: str, app: str) -> float:
        """Speed of one GPU of `kind` on `app`, relative to one T4 (the profiled kind)."""
        try:
            return self.speed[(kind, app)]
        except KeyError:
            raise UserError(f"no speed for GPU kind {kind!r} on application {app!r}") from None

    def price(self, kind: str, tier: str) -> float:
        if tier not in TIERS:
            raise UserError(f"unknown pricing tier {tier!r} (known: {', '.join(TIERS)})")
        return self.price_usd_per_hour[(self.check(kind), tier)]


@cache
def load_kinds() -> KindTable:
    spec = json.loads(resources.files("shoal.data").joinpath("sim", "kinds.json").read_text())
    catalog = load_catalog()
    v100 = catalog.kind("v100").throughput_steps_per_s
    logs = []
    for anchor in spec["t4_anchor"]:
        t4_step_s = load_profile(anchor["app"]).step_time_s(1, 1, anchor["local_bsz"])
        logs.append(math.log(v100[anchor["workload"]] * t4_step_s))
    v100_over_t4 = math.exp(sum(logs) / len(logs))

    speed: dict[tuple[str, str], float] = {}
    prices: dict[tuple[str, str], float] = {}
    memory: dict[str, float] = {}
    for name, kind in catalog.kinds.items():
        memory[name] = kind.memory_gib
        for tier in TIERS:
            prices[(name, tier)] = kind.price_usd_per_hour[tier]
        mean_ratio = catalog.relative_speed(name) / catalog.relative_speed("v100")
        for app in APPS:
            workload = spec["app_workloads"].get(app)
            ratio = (
                kind.throughput_steps_per_s[workload] / v100[workload] if workload else mean_ratio
            )
            speed[(name, app)] = ratio * v100_over_t4
    for name, extra in spec["extra_kinds"].items():
        memory[name] = float(extra["memory_gib"])
        for tier in TIERS:
            prices[(name, tier)] = float(extra["price_usd_per_hour"][tier])
    for app in APPS:
        speed[(PROFILE_KIND, app)] = 1.0
    return KindTable(speed, prices, memory)
