"""The pricing-tier choice: spot while it has room, on-demand otherwise.

Spot GPUs cost a fraction of on-demand ones but can be revoked. An elastic job loses only the
revoked GPUs' share (it shrinks and goes on), so it takes spot first; a gang restarts from a
checkpoint on any revocation, so it takes on-demand first. The simulator's shoal policy decides
with these; the live controller will (issues 13/14).
"""

from __future__ import annotations

from shoal.perf.devices import load_devices

SPOT_FIRST = ("spot", "on_demand")
ON_DEMAND_FIRST = ("on_demand", "spot")


def tier_order(elastic: bool) -> tuple[str, str]:
    """Which tier a job should try first: elastic jobs survive a revocation, gangs do not."""
    return SPOT_FIRST if elastic else ON_DEMAND_FIRST


def marginal_tier(spot_room: int) -> str:
    """The tier the next GPU of a kind would be billed at (spot fills first)."""
    return "spot" if spot_room > 0 else "on_demand"


def marginal_price(kind: str, spot_room: int) -> float:
    """USD per hour of the next GPU of `kind`, on the cheapest tier that has room."""
    return load_devices().price(kind, marginal_tier(spot_room))
