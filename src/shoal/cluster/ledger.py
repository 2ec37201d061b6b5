"""The cost ledger: per-second billing of servers, the way GCE and EC2 bill GPU VMs.

A server is billed from the moment it is opened until it is closed, at its price per hour for its
tier (`on_demand` or `spot`). A revoked spot server is closed at its revocation time, so it is
billed until then and no further. Charges accumulate per account (a job, or "cluster") so the
simulator can report cost per job and in total.
"""

from __future__ import annotations

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
