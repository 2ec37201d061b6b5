"""The price of a placement: USD per hour and per step, from the device table's prices.

A placement is a count of GPUs per kind, all on one pricing tier or with a tier per kind. The
ledger of what a run actually spent stays in `shoal.cluster.ledger`; this is the model a
controller weighs before it decides.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.perf.devices import load_devices


def price_per_hour(counts: Mapping[str, int], tier: str | Mapping[str, str] = "on_demand") -> float:
    """USD per hour of `counts` GPUs per kind on `tier` (one tier, or one per kind)."""
    devices = load_devices()
    return sum(
        n * devices.price(kind, tier if isinstance(tier, str) else tier[kind])
        for kind, n in counts.items()
    )


def price_per_step(
    counts: Mapping[str, int], step_s: float, tier: str | Mapping[str, str] = "on_demand"
) -> float:
    """USD one step of `step_s` seconds costs on this placement."""
    return price_per_hour(counts, tier) * step_s / 3600.0
