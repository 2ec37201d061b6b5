"""Pure control: decisions from observations (re-planning, batch size, pricing tier)."""

from shoal.control.rebalance import Rebalancer

__all__ = ["Rebalancer"]
