"""The cost ledger: per-second billing of servers, the way GCE and EC2 bill GPU VMs.

A server is billed from the moment it is opened until it is closed, at its price per hour for its
tier (`on_demand` or `spot`). A revoked spot server is closed at its revocation time, so it is
billed until then and no further. Charges accumulate per account (a job, or "cluster") so the
simulator can report cost per job and in total. `carry_over` reads an earlier attempt's lease
records back, so that a resumed run continues its ledger instead of starting a new one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TIERS = ("on_demand", "spot")


@dataclass
class _Open:
    account: str
    price_usd_per_hour: float
    since_s: float


@dataclass
class CostLedger:
    usd_by_account: dict[str, float] = field(default_factory=dict)
    _open: dict[str, _Open] = field(default_factory=dict)

    def open(self, server: str, account: str, price_usd_per_hour: float, now_s: float) -> None:
        """Start billing `server` to `account` at `now_s`."""
        if server in self._open:
            raise ValueError(f"server {server!r} is already being billed")
        if price_usd_per_hour < 0 or now_s < 0:
            raise ValueError("price and time must be >= 0")
        self._open[server] = _Open(account, price_usd_per_hour, now_s)

    def close(self, server: str, now_s: float) -> float:
        """Stop billing `server` at `now_s` (its release or revocation); return its charge."""
        entry = self._open.pop(server)
        if now_s < entry.since_s:
            raise ValueError(f"server {server!r} closed before it was opened")
        usd = entry.price_usd_per_hour * (now_s - entry.since_s) / 3600.0
        self.usd_by_account[entry.account] = self.usd_by_account.get(entry.account, 0.0) + usd
        return usd

    def charge(self, account: str, usd: float) -> None:
        """Add an already-computed charge (e.g. GPU-seconds x price) to `account`."""
        self.usd_by_account[account] = self.usd_by_account.get(account, 0.0) + usd

    def close_all(self, now_s: float) -> None:
        for server in list(self._open):
            self.close(server, now_s)

    def is_open(self, server: str) -> bool:
        return server in self._open

    @property
    def total_usd(self) -> float:
        return sum(self.usd_by_account.values())


@dataclass
class Carried:
    """What the earlier attempts of a resumed run spent: charges by kind and tier, their
    revocations, the emulated time they reached (the resumed clock continues from it), the
    servers they numbered, and the leases they left open (a launcher killed hard), closed now
    at `end_s` as (record, usd) so that every server is billed once."""

    usd_by_kind: dict[str, float] = field(default_factory=dict)
    usd_by_tier: dict[str, float] = field(default_factory=dict)
    revocations: int = 0
    end_s: float = 0.0
    servers: int = 0
    unclosed: list[tuple[dict, float]] = field(default_factory=list)

    @property
    def usd(self) -> float:
        return sum(self.usd_by_kind.values())


def carry_over(leases: list[dict], times_s: list[float]) -> Carried:
    """The ledger of earlier attempts from their lease records (`{"action": "open"|"close",
    "server", "device", "tier", "usd_per_hour", "t_s", "cause", "usd"}`, in order) and the
    emulated times of their other records (cost lines): a close's `usd` is what was billed;
    an open with no close is billed from its open to the last time seen."""
    out = Carried(end_s=max([0.0, *times_s, *(x["t_s"] for x in leases)]))
    opened = {x["server"]: x for x in leases if x["action"] == "open"}
    closed = {x["server"]: x for x in leases if x["action"] == "close"}
    for server, start in opened.items():
        if server in closed:
            usd = closed[server]["usd"]
            out.revocations += closed[server].get("cause") == "revoked"
        else:
            usd = start["usd_per_hour"] * max(0.0, out.end_s - start["t_s"]) / 3600.0
            out.unclosed.append((start, usd))
        out.usd_by_kind[start["device"]] = out.usd_by_kind.get(start["device"], 0.0) + usd
        out.usd_by_tier[start["tier"]] = out.usd_by_tier.get(start["tier"], 0.0) + usd
        number = re.search(r"(\d+)$", server)
        out.servers = max(out.servers, int(number[1]) + 1 if number else len(opened))
    return out
