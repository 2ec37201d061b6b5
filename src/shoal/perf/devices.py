"""The device table: which GPU kinds exist, how fast each is, what it costs, how much it holds.

One table, read once (`load_devices`) from `shoal/data/devices.json`, for both drivers: the live
launcher (emulated slowdowns and planning priors) and the simulator. The unit of speed is
steps/s; a speed is always returned relative to a stated reference:

- per Gavel workload (`workload_speed`): a kind's measured steps/s (Gavel, OSDI'20, isolated
  single-job steps, `data/gavel/throughputs.json`) over the fastest measured kind's, so <= 1.
  With no workload named it is the geometric mean over all measured single-GPU workloads, so one
  odd workload cannot dominate. This is what `shoal run` emulates.
- per Pollux application (`app_speed`): steps/s relative to one T4, the kind Pollux profiled every
  application on. Gavel and Pollux are joined through workloads measured in both (`t4_anchor`):
  the V100/T4 ratio is the geometric mean of Gavel's V100 steps/s times Pollux's T4 seconds/step
  over those pairs. A kind's speed for an application is Gavel's steps/s of the application's
  stand-in workload on that kind over V100's, times that ratio; an application with no same-model
  Gavel workload uses the kind's geometric-mean speed over V100's instead (Gavel's recommendation
  model, the nearest to NCF, runs slower on V100 than on K80, so a loose stand-in would mislead).

Prices are USD per GPU-hour per tier (on_demand, spot).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from shoal.errors import UserError
from shoal.perf.profiles import APPS, PROFILE_KIND, load_profile

TIERS = ("on_demand", "spot")
MAX_WORKERS = 4096  # per --workers spec: a sanity bound on the grammar, not a resource policy


@dataclass(frozen=True)
class DeviceKind:
    name: str
    memory_gib: float
    price_usd_per_hour: dict[str, float]
    # steps/s of each Gavel-measured workload on one device of this kind (empty: not measured)
    throughput_steps_per_s: dict[str, float] = field(repr=False)


@dataclass(frozen=True)
class DeviceTable:
    devices: dict[str, DeviceKind]
    speed: dict[tuple[str, str], float]  # (kind, app) -> steps/s relative to one T4

    @property
    def kinds(self) -> list[str]:
        return sorted(self.devices)

    @property
    def memory_gib(self) -> dict[str, float]:
        return {k: d.memory_gib for k, d in self.devices.items()}

    def kind(self, name: str) -> DeviceKind:
        try:
            return self.devices[name.lower()]
        except KeyError:
            known = ", ".join(self.kinds)
            raise UserError(f"unknown device kind {name!r} (known: {known})") from None

    def check(self, name: str) -> str:
        """The canonical name of kind `name` (UserError naming the known kinds)."""
        return self.kind(name).name

    def measured(self) -> list[DeviceKind]:
        return [d for d in self.devices.values() if d.throughput_steps_per_s]

    def workloads(self) -> list[str]:
        common = set.intersection(*(set(d.throughput_steps_per_s) for d in self.measured()))
        return sorted(common)

    def workload_speed(self, name: str, workload: str | None = None) -> float:
        """Speed of one device of kind `name` relative to the fastest measured kind (<= 1)."""
        kind = self.kind(name)
        if not kind.throughput_steps_per_s:
            raise UserError(f"no measured throughput for device kind {kind.name!r}")
        if workload and workload not in self.workloads():
            raise UserError(f"no measured throughput for workload {workload!r}")
        logs = []
        for w in [workload] if workload else self.workloads():
            best = max(d.throughput_steps_per_s[w] for d in self.measured())
            logs.append(math.log(kind.throughput_steps_per_s[w] / best))
        return math.exp(sum(logs) / len(logs))

    def app_speed(self, kind: str, app: str) -> float:
        """Speed of one GPU of `kind` on `app`, relative to one T4 (the profiled kind)."""
        try:
            return self.speed[(kind, app)]
        except KeyError:
            raise UserError(f"no speed for GPU kind {kind!r} on application {app!r}") from None

    def price(self, kind: str, tier: str) -> float:
        """USD per GPU-hour of `kind` on pricing tier `tier`."""
        if tier not in TIERS:
            raise UserError(f"unknown pricing tier {tier!r} (known: {', '.join(TIERS)})")
        return self.kind(kind).price_usd_per_hour[tier]

    def parse_workers(self, spec: str) -> list[str]:
        """Parse a worker spec such as ``v100,k80,k80`` or ``2xv100,k80`` into kind names."""
        kinds: list[str] = []
        for item in (s.strip() for s in spec.split(",")):
            # [0-9], not \d: other scripts' digits are \d, and int() reads them ('２' is 2)
            match = re.fullmatch(r"(?:([0-9]+)\s*[x*]\s*)?([A-Za-z0-9_-]+)", item)
            if not match:
                tier = ":spot" in item or ":on_demand" in item or ":on-demand" in item
                hint = "; a :TIER needs --provider local" if tier else ""
                if any(c.isdigit() and not c.isascii() for c in item):
                    hint = "; N in ASCII digits"
                raise UserError(f"bad worker spec item {item!r} (expected KIND or NxKIND{hint})")
            count = int(match.group(1) or 1)
            if count < 1:
                raise UserError(f"bad worker count in {item!r}")
            if len(kinds) + count > MAX_WORKERS:  # a typo's 10**9 must not exhaust the memory
                raise UserError(f"--workers names more than {MAX_WORKERS} workers")
            kinds += [self.kind(match.group(2)).name] * count
        return kinds


def _read_json(name: str) -> dict:
    return json.loads(resources.files("shoal.data").joinpath(name).read_text())


def _app_speeds(spec: dict, table: DeviceTable) -> dict[tuple[str, str], float]:
    """(kind, app) -> speed relative to one T4, through the T4 anchor (see the module docstring)."""
    v100 = table.kind("v100").throughput_steps_per_s
    logs = []
    for anchor in spec["t4_anchor"]:
        t4_step_s = load_profile(anchor["app"]).step_time_s(1, 1, anchor["local_bsz"])
        logs.append(math.log(v100[anchor["workload"]] * t4_step_s))
    v100_over_t4 = math.exp(sum(logs) / len(logs))
    speed: dict[tuple[str, str], float] = {}
    for kind in table.measured():
        mean_ratio = table.workload_speed(kind.name) / table.workload_speed("v100")
        for app in APPS:
            workload = spec["app_workloads"].get(app)
            ratio = (
                kind.throughput_steps_per_s[workload] / v100[workload] if workload else mean_ratio
            )
            speed[(kind.name, app)] = ratio * v100_over_t4
    for app in APPS:
        speed[(PROFILE_KIND, app)] = 1.0
    return speed


@cache
def load_devices() -> DeviceTable:
    spec = _read_json("devices.json")
    gavel = _read_json("gavel/throughputs.json")["throughputs"]
    devices = {}
    for name, kind in spec["kinds"].items():
        measured = gavel[kind["gavel"]] if kind["gavel"] else {}
        devices[name] = DeviceKind(
            name=name,
            memory_gib=float(kind["memory_gib"]),
            price_usd_per_hour={t: float(kind["price_usd_per_hour"][t]) for t in TIERS},
            throughput_steps_per_s={w: by_scale["1"] for w, by_scale in measured.items()},
        )
    table = DeviceTable(devices, {})
    table.speed.update(_app_speeds(spec, table))
    return table
