"""TEMP stand-in for engineer A's provider (issue 14 contract): offers, leases, an emulated
local provider with seeded revocations. Dropped at the merge in favour of A's module."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Protocol

from shoal.cluster.revocation import RevocationModel, load_gce_lifetimes, revocation_model
from shoal.errors import UserError
from shoal.perf.devices import load_devices


@dataclass(frozen=True)
class Offer:
    kind: str
    tier: str
    usd_per_hour: float
    startup_s: float
    notice_s: float | None
    quota: int


@dataclass(frozen=True)
class Lease:
    server: str
    kind: str
    tier: str
    usd_per_hour: float
    requested_s: float
    ready_s: float
    revoke_at_s: float
    notice_s: float | None


class Provider(Protocol):
    def offers(self, now_s: float) -> list[Offer]: ...
    def request(self, kind: str, tier: str, now_s: float) -> Lease | None: ...
    def release(self, server: str, now_s: float) -> None: ...


@dataclass
class EmulatedProvider:
    kinds: tuple[str, ...]
    seed: int = 0
    lifetimes: dict[str, RevocationModel] | None = None
    startup_s: float = 60.0
    notice_s: float | None = 30.0
    quota: dict[tuple[str, str], int] | None = None
    outages: tuple[tuple[str, str, float, float], ...] = ()
    _count: int = 0
    _held: dict[str, tuple[str, str]] = field(default_factory=dict)

    def _out(self, kind: str, tier: str, now_s: float) -> bool:
        return any(k == kind and t == tier and a <= now_s < b for k, t, a, b in self.outages)

    def _quota(self, kind: str, tier: str) -> int:
        return (self.quota or {}).get((kind, tier), 8)

    def offers(self, now_s: float) -> list[Offer]:
        devices = load_devices()
        return [
            Offer(k, t, devices.price(k, t), self.startup_s,
                  self.notice_s if t == "spot" else None, self._quota(k, t))
            for k in self.kinds
            for t in ("on_demand", "spot")
            if not self._out(k, t, now_s)
        ]  # fmt: skip

    def request(self, kind: str, tier: str, now_s: float) -> Lease | None:
        held = sum(v == (kind, tier) for v in self._held.values())
        if self._out(kind, tier, now_s) or held >= self._quota(kind, tier):
            return None
        n = self._count
        self._count += 1
        ready = now_s + self.startup_s
        revoke = math.inf
        if tier == "spot":
            model = (self.lifetimes or {}).get(kind) or load_gce_lifetimes()
            revoke = ready + model.sample_lifetime_s(kind, random.Random(f"{self.seed}:{n}"))
        server = f"{kind}-{tier.replace('_', '-')}-{n}"
        self._held[server] = (kind, tier)
        notice = self.notice_s if tier == "spot" else None
        price = load_devices().price(kind, tier)
        return Lease(server, kind, tier, price, now_s, ready, revoke, notice)

    def release(self, server: str, now_s: float) -> None:
        self._held.pop(server, None)


def parse_spot_lifetimes(text: str) -> dict[str, RevocationModel]:
    out = {}
    for item in text.split(","):
        kind, _, spec = item.partition(":")
        if not spec:
            raise UserError(f"--spot-lifetimes: bad item {item!r} (expected KIND:MODEL)")
        out[load_devices().check(kind.strip())] = revocation_model(spec.strip())
    return out


def load_spot_trace(path: str) -> dict[str, RevocationModel]:
    from shoal.cluster.revocation import TraceRevocations

    by_kind: dict[str, list[float]] = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as exc:
        raise UserError(f"--spot-trace {path}: {exc.strerror}") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, _, life = line.partition(",")
        try:
            value = float(life)
            kind = load_devices().check(kind.strip())
        except (ValueError, UserError):
            raise UserError(f"{path}:{n}: expected 'kind,lifetime_s', got {line!r}") from None
        by_kind.setdefault(kind, []).append(value)
    return {k: TraceRevocations(tuple(v)) for k, v in by_kind.items()}


def provider_from_config(cfg) -> EmulatedProvider:
    devices = load_devices()
    kinds = tuple(devices.check(k) for k in cfg.kind_list)
    lifetimes = {}
    if cfg.spot_lifetimes:
        lifetimes.update(parse_spot_lifetimes(cfg.spot_lifetimes))
    if cfg.spot_trace:
        lifetimes.update(load_spot_trace(cfg.spot_trace))
    return EmulatedProvider(
        kinds, cfg.seed, lifetimes or None, cfg.startup_s, cfg.notice_s,
        cfg.quota_map or None, cfg.outage_list,
    )  # fmt: skip
