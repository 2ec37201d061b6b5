"""The device catalog: which GPU kinds exist, how fast they are relative to each other, their cost.

The catalog is data, not code: `shoal/data/devices.json` lists the kinds (memory, prices) and
points each at its measured throughputs in `shoal/data/gavel/throughputs.json` (Gavel, OSDI'20,
isolated single-job steps/s). A kind's speed for a workload is its measured steps/s; with no
workload named, it is the geometric mean, over all measured single-GPU workloads, of its
throughput relative to the fastest kind, so one odd workload cannot dominate.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from shoal.errors import UserError


@dataclass(frozen=True)
class DeviceKind:
    name: str
    memory_gib: float
    price_usd_per_hour: dict[str, float]
    # steps/s of each measured workload on one device of this kind
    throughput_steps_per_s: dict[str, float] = field(repr=False)


@dataclass(frozen=True)
class Catalog:
    kinds: dict[str, DeviceKind]

    def kind(self, name: str) -> DeviceKind:
        try:
            return self.kinds[name.lower()]
        except KeyError:
            known = ", ".join(sorted(self.kinds))
            raise UserError(f"unknown device kind {name!r} (known: {known})") from None

    def workloads(self) -> list[str]:
        common = set.intersection(*(set(k.throughput_steps_per_s) for k in self.kinds.values()))
        return sorted(common)

    def relative_speed(self, name: str, workload: str | None = None) -> float:
        """Speed of one device of kind `name` relative to the fastest catalogued kind (<= 1)."""
        names = [workload] if workload else self.workloads()
        if workload and workload not in self.workloads():
            raise UserError(f"no measured throughput for workload {workload!r}")
        logs = []
        for w in names:
            best = max(k.throughput_steps_per_s[w] for k in self.kinds.values())
            logs.append(math.log(self.kind(name).throughput_steps_per_s[w] / best))
        return math.exp(sum(logs) / len(logs))

    def parse_workers(self, spec: str) -> list[str]:
        """Parse a worker spec such as ``v100,k80,k80`` or ``2xv100,k80`` into kind names."""
        kinds: list[str] = []
        for item in (s.strip() for s in spec.split(",")):
            match = re.fullmatch(r"(?:(\d+)\s*[x*]\s*)?([A-Za-z0-9_-]+)", item)
            if not match:
                raise UserError(f"bad worker spec item {item!r} (expected KIND or NxKIND)")
            count = int(match.group(1) or 1)
            if count < 1:
                raise UserError(f"bad worker count in {item!r}")
            kinds += [self.kind(match.group(2)).name] * count
        return kinds


def _read_json(name: str) -> dict:
    return json.loads(resources.files("shoal.data").joinpath(name).read_text())


@cache
def load_catalog() -> Catalog:
    devices = _read_json("devices.json")["kinds"]
    gavel = _read_json("gavel/throughputs.json")["throughputs"]
    kinds = {}
    for name, spec in devices.items():
        measured = {w: by_scale["1"] for w, by_scale in gavel[spec["gavel"]].items()}
        kinds[name] = DeviceKind(
            name=name,
            memory_gib=float(spec["memory_gib"]),
            price_usd_per_hour=dict(spec["price_usd_per_hour"]),
            throughput_steps_per_s=measured,
        )
    return Catalog(kinds)
