"""Providers: what servers can be had, at what price, how fast they start and how they end.

A provider sells servers of the device table's kinds on two tiers: on-demand (kept until
released) and spot (cheaper, revoked when the provider wants them back, with a notice or none).
`Provider` is the interface a driver talks to -- `offers`, `request` (None: no capacity now),
`release` -- so a real cloud or cluster backend is an adapter behind the same three calls.

`EmulatedProvider` is the one implementation: seeded and deterministic. A request succeeds
unless the (kind, tier) quota is full or an outage window covers it; a spot lease carries the
time it will be revoked, drawn from the kind's lifetime model (`cluster.revocation`: the GCE
measurements by default) with a generator keyed by the lease's SLOT: `(seed, kind, tier, slot,
use)`, slot the lowest place of that (kind, tier) no held lease occupies (a lease under its
revocation notice has given its place up) and use how many leases that slot has had. So the
same requests meet the same revocations in a live run and in the scenario simulator, and a
small difference between the two (an extra server bought and given back, a kind tried once)
changes only its own draws: the i-th server of a kind goes on meeting the same lifetimes.
(Keyed by the run's global lease count instead, one differing request gave every later server
another lifetime.) All times are emulated seconds from the run's launch; prices are USD per hour.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from shoal.cluster.revocation import (
    RevocationModel,
    TraceRevocations,
    load_gce_lifetimes,
    revocation_model,
)
from shoal.digits import ascii_digits
from shoal.errors import UserError, unreadable
from shoal.perf.devices import TIERS, load_devices

DEFAULT_QUOTA = 8  # servers per (kind, tier) at once, when no quota is given
ANY_KIND = "*"  # key of a lifetime model that applies to every kind (a kind-less trace)


@dataclass(frozen=True)
class Offer:
    kind: str
    tier: str  # "on_demand" | "spot"
    usd_per_hour: float
    startup_s: float  # request -> server ready
    notice_s: float | None  # spot: warning before revocation; None: none (and on-demand)
    quota: int  # at most this many servers of (kind, tier) at once


@dataclass(frozen=True)
class Lease:
    server: str
    kind: str
    tier: str
    usd_per_hour: float
    requested_s: float  # billed from here: clouds bill a booting VM
    ready_s: float  # requested_s + startup_s: the worker may join from here
    revoke_at_s: float  # math.inf: on-demand, or a lifetime beyond the horizon
    notice_s: float | None


@cache
def _gce() -> RevocationModel:
    return load_gce_lifetimes()  # read once: every kind without a named model shares it


class Provider(Protocol):
    def offers(self, now_s: float) -> list[Offer]: ...

    def request(self, kind: str, tier: str, now_s: float) -> Lease | None: ...

    def release(self, server: str, now_s: float) -> None: ...


def _check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise UserError(f"unknown pricing tier {tier!r} (known: {', '.join(TIERS)})")
    return tier


@dataclass
class EmulatedProvider:
    kinds: tuple[str, ...]
    seed: int = 0
    lifetimes: dict[str, RevocationModel] | None = None  # per kind; None -> GCE lifetimes
    startup_s: float = 60.0
    notice_s: float | None = 30.0  # GCE's 30 s; None: revocations without notice
    quota: dict[tuple[str, str], int] | None = None  # default DEFAULT_QUOTA per (kind, tier)
    outages: tuple[tuple[str, str, float, float], ...] = ()  # (kind, tier, from_s, to_s)
    _leases: dict[str, Lease] = field(init=False, default_factory=dict, repr=False)
    _count: int = field(init=False, default=0, repr=False)
    _attempt: int = field(init=False, default=0, repr=False)  # servers of earlier attempts
    _slot_of: dict[str, int] = field(init=False, default_factory=dict, repr=False)
    _uses: dict[tuple[str, str, int], int] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        devices = load_devices()
        if not self.kinds:
            raise UserError("the provider offers no kind (name at least one, e.g. k80)")
        self.kinds = tuple(dict.fromkeys(devices.check(k) for k in self.kinds))
        seconds = (self.startup_s,) if self.notice_s is None else (self.startup_s, self.notice_s)
        if not all(0 <= s < math.inf for s in seconds):  # NaN was taken: a replay's time NaN
            raise UserError("provider start-up and notice must be finite seconds >= 0")
        if self.lifetimes is None:
            self.lifetimes = {k: _gce() for k in self.kinds}
        for key, n in (self.quota or {}).items():
            if n < 0:
                raise UserError(f"quota for {key[0]}:{key[1]} must be >= 0")
            devices.check(key[0]), _check_tier(key[1])
        for kind, tier, start, stop in self.outages:
            devices.check(kind), _check_tier(tier)
            if not 0 <= start <= stop < math.inf:
                raise UserError(f"outage of {kind}:{tier} needs finite 0 <= from <= to seconds")

    def model(self, kind: str) -> RevocationModel:
        """The lifetime model of a spot server of `kind` (GCE's when none is named for it)."""
        lifetimes = self.lifetimes or {}
        found = lifetimes.get(kind, lifetimes.get(ANY_KIND))
        return found if found is not None else _gce()

    def quota_of(self, kind: str, tier: str) -> int:
        return (self.quota or {}).get((kind, tier), DEFAULT_QUOTA)

    def in_outage(self, kind: str, tier: str, now_s: float) -> bool:
        return any(k == kind and t == tier and a <= now_s < b for k, t, a, b in self.outages)

    def available(self, kind: str, tier: str, now_s: float) -> int:
        """How many more servers of (kind, tier) can be had at `now_s`: none in an outage, else
        the quota less those held."""
        if self.in_outage(kind, tier, now_s):
            return 0
        held = sum(1 for x in self._leases.values() if (x.kind, x.tier) == (kind, tier))
        return max(0, self.quota_of(kind, tier) - held)

    def held(self, now_s: float) -> list[Lease]:
        """Leases still held at `now_s`: not released and not yet revoked."""
        return [x for x in self._leases.values() if x.revoke_at_s > now_s]

    def _forget_revoked(self, now_s: float) -> None:
        """Drop the leases revoked by `now_s`: they hold no quota nor slot, a long run need not
        keep them."""
        self._leases = {k: x for k, x in self._leases.items() if x.revoke_at_s > now_s}
        self._slot_of = {k: i for k, i in self._slot_of.items() if k in self._leases}

    def offers(self, now_s: float) -> list[Offer]:
        """What can be had now: every (kind, tier) not in an outage, quota as a total."""
        devices = load_devices()
        out = []
        for kind in self.kinds:
            for tier in TIERS:
                if self.in_outage(kind, tier, now_s) or self.quota_of(kind, tier) == 0:
                    continue
                notice = self.notice_s if tier == "spot" else None
                price = devices.price(kind, tier)
                out.append(
                    Offer(kind, tier, price, self.startup_s, notice, self.quota_of(kind, tier))
                )
        return out

    def request(self, kind: str, tier: str, now_s: float) -> Lease | None:
        """A new server of (kind, tier), or None when the quota is full or an outage is on."""
        kind, tier = load_devices().check(kind), _check_tier(tier)
        if kind not in self.kinds:
            raise UserError(
                f"the provider does not offer {kind!r} (offers: {', '.join(self.kinds)})"
            )
        self._forget_revoked(now_s)
        if self.available(kind, tier, now_s) < 1:
            return None
        n, ready = self._count, now_s + self.startup_s
        self._count += 1
        slot = self._take_slot(kind, tier, now_s)
        revoke_at, notice = math.inf, None
        if tier == "spot":
            use = self._uses.get((kind, tier, slot), 0)
            self._uses[(kind, tier, slot)] = use + 1
            rng = random.Random(f"{self.seed}:{self._attempt}:{kind}:{tier}:{slot}:{use}")
            revoke_at, notice = ready + self.model(kind).sample_lifetime_s(kind, rng), self.notice_s
        price = load_devices().price(kind, tier)
        tier_name = "spot" if tier == "spot" else "od"
        lease = Lease(f"{kind}-{tier_name}-{n}", kind, tier, price, now_s, ready, revoke_at, notice)
        self._leases[lease.server] = lease
        self._slot_of[lease.server] = slot
        return lease

    def _take_slot(self, kind: str, tier: str, now_s: float) -> int:
        """The lowest place of (kind, tier) that no held lease occupies. A lease under its
        revocation notice has given its place up already: a replacement asked for during the
        notice (the simulator asks at the notice) and one asked for after the revocation (the
        live driver asks when the worker is gone) take the same place, so the same draw."""
        taken = {
            self._slot_of[x.server]
            for x in self._leases.values()
            if (x.kind, x.tier) == (kind, tier) and not _under_notice(x, now_s)
        }
        return next(i for i in range(len(taken) + 1) if i not in taken)

    def continue_numbering(self, servers: int) -> None:
        """A resumed run's provider: its servers are numbered after the `servers` an earlier
        attempt requested, so no name is billed twice, and their lifetimes are fresh draws (the
        attempt's count is part of every draw's key: slot 0 does not meet its old lives again)."""
        self._count = max(self._count, servers)
        self._attempt = max(self._attempt, servers)

    def release(self, server: str, now_s: float) -> None:
        """Give `server` back (a revoked one is gone already: releasing it is a no-op)."""
        self._leases.pop(server, None)
        self._slot_of.pop(server, None)


def _under_notice(lease: Lease, now_s: float) -> bool:
    """Whether `lease` has had its revocation notice by `now_s` (with none: never before it
    is gone)."""
    if lease.notice_s is None or not math.isfinite(lease.revoke_at_s):
        return False
    return now_s >= lease.revoke_at_s - lease.notice_s


def parse_spot_lifetimes(text: str) -> dict[str, RevocationModel]:
    """`KIND:MODEL,...` (e.g. `k80:gce,v100:p3`); MODEL: gce, bathtub, p3, g4dn, none."""
    devices = load_devices()
    out: dict[str, RevocationModel] = {}
    for item in (s.strip() for s in text.split(",")):
        kind, sep, model = item.partition(":")
        if not sep or not kind.strip() or not model.strip():
            raise UserError(f"--spot-lifetimes: bad item {item!r} (expected KIND:MODEL)")
        kind = devices.check(kind.strip())
        if kind in out:  # the last one was kept without a word
            raise UserError(f"--spot-lifetimes: {kind} given twice")
        out[kind] = revocation_model(model.strip().lower())
    return out


def _trace_row(row: list[str], where: str) -> tuple[str, str, float]:
    """One line of a trace file: ("bamboo", node action, ms) or ("csv", kind, lifetime_s)."""
    try:
        if len(row) == 3 and row[1] in ("add", "remove"):
            ms = float(ascii_digits(row[0]))
            if math.isfinite(ms):  # NaN or inf ms made a NaN lifetime, taken silently
                return f"bamboo:{row[1]}", row[2], ms / 1000.0
        if len(row) == 2:
            life = float(ascii_digits(row[1]))
            if life >= 0 and not math.isnan(life):
                return "csv", load_devices().check(row[0]), life
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    except ValueError:
        pass
    raise UserError(f"{where}: expected 'ms,add|remove,node' or 'kind,lifetime_s'")


def load_spot_trace(path: str) -> dict[str, RevocationModel]:
    """Spot lifetimes from a file: a Bamboo trace (`ms,add|remove,node`: node lifetimes for
    every kind, key `ANY_KIND`) or a CSV of `kind,lifetime_s` lines (`inf`: never revoked).
    Blank lines and `#` comments are skipped; a malformed line is a UserError naming FILE:LINE."""
    try:
        lines = Path(path).read_text(encoding="utf-8-sig").splitlines()  # a BOM is not data
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--spot-trace {path}: {unreadable(exc)}") from None
    added: dict[str, float] = {}
    bamboo: list[float] = []
    by_kind: dict[str, list[float]] = {}
    formats = set()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fmt, key, value = _trace_row([c.strip() for c in line.split(",")], f"{path}:{lineno}")
        formats.add(fmt.split(":")[0])
        if len(formats) > 1:
            raise UserError(f"{path}:{lineno}: mixes Bamboo events and kind,lifetime lines")
        if fmt == "csv":
            by_kind.setdefault(key, []).append(value)
        elif fmt == "bamboo:add":
            added[key] = value
        elif key in added:
            if value < added[key]:
                raise UserError(f"{path}:{lineno}: node {key} removed before it was added")
            bamboo.append(value - added.pop(key))
    if not formats:
        raise UserError(f"--spot-trace {path}: no lifetimes in the file")
    if by_kind:
        return {k: TraceRevocations(tuple(sorted(v)), name=path) for k, v in by_kind.items()}
    if not bamboo and not added:  # removals of nodes never added only: the first spot server
        # drew from no lifetime (an IndexError in the run, after its workers had started)
        raise UserError(f"--spot-trace {path}: no node is added in the file (no lifetimes)")
    # nodes still up at the end of the trace are censored: never revoked within it
    lifetimes = tuple(sorted(bamboo + [math.inf] * len(added)))
    return {ANY_KIND: TraceRevocations(lifetimes, name=path)}


def _get(cfg: Any, name: str, default: Any = None) -> Any:
    if isinstance(cfg, Mapping):
        return cfg.get(name, default)
    return getattr(cfg, name, default)


def _parse_quota(raw: Any) -> dict[tuple[str, str], int] | None:
    """`{"k80:spot": 2}` or `[["k80", "spot", 2]]` (JSON) or `{("k80", "spot"): 2}` ->
    {(kind, tier): n}."""
    if not raw:
        return None
    if isinstance(raw, list | tuple):  # the scenario file's [[kind, tier, n], ...]
        try:
            raw = {(str(k), str(t)): n for k, t, n in raw}
        except (TypeError, ValueError):
            raise UserError("provider: quota must be [[kind, tier, n], ...]") from None
    elif not isinstance(raw, Mapping):  # e.g. a scenario file's "quota": 5
        raise UserError("provider: quota must be [[kind, tier, n], ...]")
    out = {}
    for key, n in dict(raw).items():
        if isinstance(key, str):
            kind, _, tier = key.partition(":")
        else:  # (kind, tier): a ProviderConfig's quota_map, the scenario file's list
            kind, tier = key
        if not isinstance(n, int) or isinstance(n, bool):
            raise UserError(f"quota of {key!r} must be an integer")
        out[(load_devices().check(kind), _check_tier(tier))] = n
    return out


# A provider as JSON (a scenario file's "provider"): the fields a live run writes. time_scale
# records the live run's pace; a replay works in emulated seconds and does not read it.
JSON_FIELDS = (
    "kinds", "seed", "spot_lifetimes", "spot_trace", "startup_s", "notice_s", "quota", "outages",
    "time_scale",
)  # fmt: skip


def _check_json(cfg: Mapping) -> None:
    """The fields and types of a provider given as JSON: a misspelt field was ignored, and a
    number for kinds or a list for a trace path was a traceback."""
    unknown = sorted(str(k) for k in set(cfg) - set(JSON_FIELDS))
    if unknown:
        raise UserError(f"provider: unknown field {unknown[0]!r} (known: {', '.join(JSON_FIELDS)})")
    kinds = cfg.get("kinds")
    names = isinstance(kinds, list | tuple) and all(isinstance(k, str) for k in kinds)
    if kinds is not None and not isinstance(kinds, str) and not names:
        raise UserError('provider: kinds must be a list of kind names, e.g. ["k80", "v100"]')
    for name in ("spot_lifetimes", "spot_trace"):
        if not isinstance(cfg.get(name), str | None):
            raise UserError(f"provider: {name} must be a string or null")
    seed = cfg.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):  # int(1.9) was seed 1, silently
        raise UserError("provider: seed must be an integer")


def provider_from_config(cfg: Any) -> EmulatedProvider:
    """The emulated provider a `ProviderConfig` (or its JSON dict) describes; UserError
    ("provider: ...") when the JSON is bad."""
    if isinstance(cfg, Mapping):
        _check_json(cfg)
    kinds = (_get(cfg, "kind_list") if hasattr(cfg, "kind_list") else _get(cfg, "kinds")) or ()
    if isinstance(kinds, str):
        kinds = tuple(k.strip() for k in kinds.split(",") if k.strip())
    lifetimes: dict[str, RevocationModel] = {}
    if _get(cfg, "spot_trace"):
        lifetimes.update(load_spot_trace(_get(cfg, "spot_trace")))
    if _get(cfg, "spot_lifetimes"):
        lifetimes.update(parse_spot_lifetimes(_get(cfg, "spot_lifetimes")))
    # a ProviderConfig holds its flags' text and parses it in properties; a JSON dict is parsed
    quota = _get(cfg, "quota_map") if hasattr(cfg, "quota_map") else _get(cfg, "quota")
    raw_outages = _get(cfg, "outage_list") if hasattr(cfg, "outage_list") else _get(cfg, "outages")
    try:
        outages = tuple((str(k), str(t), float(a), float(b)) for k, t, a, b in raw_outages or ())
        startup_s, notice = float(_get(cfg, "startup_s", 60.0)), _get(cfg, "notice_s", 30.0)
        notice_s = None if notice is None else float(notice)
        seed = int(_get(cfg, "seed", 0))
    except (TypeError, ValueError):
        raise UserError("provider: bad seed, startup_s, notice_s or outages") from None
    return EmulatedProvider(
        kinds=tuple(kinds),
        seed=seed,
        lifetimes=lifetimes or None,
        startup_s=startup_s,
        notice_s=notice_s,
        quota=_parse_quota(quota),
        outages=outages,
    )
