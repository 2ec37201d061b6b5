"""Revocation models for spot (preemptible) servers.

A revocation model answers one question: given a server of some kind that starts now, when will
the provider take it back? Three models share the `RevocationModel` interface:

- `EmpiricalLifetimes`: resamples measured lifetimes of preemptible GCE VMs (ICAC'19 transient
  paper, `data/transient/lifetime/lifetime.csv`, Feb 2019). A lifetime at or beyond the provider's
  24 h cap counts as "not revoked" (the VM reached the cap or was stopped by the experimenter).
- `TraceRevocations`: replays real AWS spot add/remove events (Bamboo, NSDI'23) as node lifetimes.
- `BathtubLifetimes`: the parametric CDF of Kadupitiya et al. (HPDC'20),
  F(t) = A (1 - exp(-t/tau1) + exp((t - b)/tau2)), sampled by inversion on a grid.

`math.inf` means "never revoked within the horizon".
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Protocol

from shoal.errors import UserError

# GCE preemptible VMs live at most 24 h; lifetimes measured at the cap are not revocations.
GCE_MAX_LIFETIME_S = 24 * 3600.0
# lifetime.csv records start/stop to the minute; anything past 23.5 h is treated as the cap.
_CAP_MARGIN_S = 0.5 * 3600.0


class RevocationModel(Protocol):
    def sample_lifetime_s(self, kind: str, rng: random.Random) -> float:
        """Seconds until the provider revokes a fresh server of `kind` (inf: never)."""
        ...


def _data_path(*parts: str):
    return resources.files("shoal.data").joinpath(*parts)


@dataclass(frozen=True)
class EmpiricalLifetimes:
    """Resample measured VM lifetimes per kind; minute-resolution records get a uniform jitter."""

    lifetimes_s: dict[str, tuple[float, ...]]
    max_lifetime_s: float = GCE_MAX_LIFETIME_S
    pool_unmeasured: bool = True  # unmeasured kinds (T4) use all measured kinds pooled

    def __post_init__(self) -> None:
        for kind, values in self.lifetimes_s.items():
            if not values or min(values) < 0:
                raise ValueError(f"lifetimes for {kind!r} must be non-empty and >= 0")

    def sample_lifetime_s(self, kind: str, rng: random.Random) -> float:
        values = self.lifetimes_s.get(kind.lower())
        if values is None:
            if not self.pool_unmeasured:
                known = ", ".join(sorted(self.lifetimes_s))
                raise UserError(f"no measured lifetimes for kind {kind!r} (known: {known})")
            # a kind nobody measured draws from all measured GPU kinds pooled
            values = tuple(v for k in sorted(self.lifetimes_s) for v in self.lifetimes_s[k])
        life = rng.choice(values)
        if life >= self.max_lifetime_s - _CAP_MARGIN_S:
            return math.inf
        # the records have one-minute resolution: spread each over its minute
        return life + rng.uniform(0.0, 60.0)

    def revoked_fraction_within(self, kind: str, horizon_s: float) -> float:
        """Fraction of measured servers revoked before `horizon_s` (the CDF at the horizon)."""
        values = self.lifetimes_s[kind.lower()]
        return sum(v < horizon_s for v in values) / len(values)


def load_gce_lifetimes() -> EmpiricalLifetimes:
    """The Feb 2019 K80/P100/V100 preemptible lifetimes of the transient-server paper."""
    path = _data_path("transient", "lifetime", "lifetime.csv")
    by_kind: dict[str, list[float]] = {}
    section = None
    with path.open() as fh:
        for row in csv.reader(fh):
            head = row[0].strip() if row else ""
            if head in ("K80", "P100", "V100"):
                section = head.lower()
                continue
            if head.startswith("Previous"):
                break  # the older CPU-only runs follow; not GPU servers
            if section is None or head == "VM name" or len(row) < 3 or not row[1]:
                continue
            start = datetime.strptime(row[1].strip(), "%m/%d/%y %H:%M")
            stop = datetime.strptime(row[2].strip(), "%m/%d/%y %H:%M")
            by_kind.setdefault(section, []).append((stop - start).total_seconds())
    return EmpiricalLifetimes({k: tuple(sorted(v)) for k, v in by_kind.items()})


@dataclass(frozen=True)
class BathtubLifetimes:
    """Kadupitiya et al.'s bathtub CDF; defaults are their typical fitted values."""

    a: float = 0.45
    tau1_s: float = 1.0 * 3600
    tau2_s: float = 0.8 * 3600
    b_s: float = 24 * 3600.0

    def __post_init__(self) -> None:
        if not 0 < self.a <= 1 or self.tau1_s <= 0 or self.tau2_s <= 0 or self.b_s <= 0:
            raise ValueError("bathtub parameters must be positive (and 0 < a <= 1)")

    def cdf(self, t_s: float) -> float:
        value = self.a * (
            1 - math.exp(-t_s / self.tau1_s) + math.exp((t_s - self.b_s) / self.tau2_s)
        )
        return min(1.0, max(0.0, value - self.a * math.exp(-self.b_s / self.tau2_s)))

    def sample_lifetime_s(self, kind: str, rng: random.Random) -> float:
        u = rng.random()
        if u >= self.cdf(self.b_s):
            return self.b_s  # survives to the provider's cap, revoked there
        lo, hi = 0.0, self.b_s
        for _ in range(40):  # bisection on the monotone CDF
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self.cdf(mid) < u else (lo, mid)
        return hi


@dataclass(frozen=True)
class TraceRevocations:
    """Lifetimes of nodes in a real spot add/remove event trace, resampled per server."""

    lifetimes_s: tuple[float, ...]
    name: str = "trace"

    def sample_lifetime_s(self, kind: str, rng: random.Random) -> float:
        return rng.choice(self.lifetimes_s)


def load_bamboo_trace(name: str = "p3") -> TraceRevocations:
    """Node lifetimes from Bamboo's AWS `{p3,g4dn}-trace.csv` (`ms,add|remove,nodeN`).

    A node still present at the end of the trace is censored: it counts as never revoked.
    """
    if name not in ("p3", "g4dn"):
        raise UserError(f"unknown spot trace {name!r} (known: p3, g4dn)")
    path = _data_path("preemption", "bamboo", f"{name}-trace.csv")
    added: dict[str, float] = {}
    lifetimes: list[float] = []
    with path.open() as fh:
        for lineno, row in enumerate(csv.reader(fh), start=1):
            if len(row) != 3 or row[1] not in ("add", "remove"):
                raise UserError(f"{path}:{lineno}: expected 'ms,add|remove,node'")
            t_s = float(row[0]) / 1000.0
            if row[1] == "add":
                added[row[2]] = t_s
            elif row[2] in added:
                lifetimes.append(t_s - added.pop(row[2]))
    lifetimes += [math.inf] * len(added)
    return TraceRevocations(tuple(sorted(lifetimes)), name=name)


@dataclass(frozen=True)
class NoRevocations:
    """On-demand servers: never revoked."""

    def sample_lifetime_s(self, kind: str, rng: random.Random) -> float:
        return math.inf


def revocation_model(spec: str) -> RevocationModel:
    """Build a model from a CLI spec: `gce` (empirical), `bathtub`, `p3`, `g4dn`, `none`."""
    builders = {
        "gce": load_gce_lifetimes,
        "bathtub": BathtubLifetimes,
        "p3": lambda: load_bamboo_trace("p3"),
        "g4dn": lambda: load_bamboo_trace("g4dn"),
        "none": NoRevocations,
    }
    if spec not in builders:
        raise UserError(f"unknown revocation model {spec!r} (known: {', '.join(builders)})")
    return builders[spec]()
