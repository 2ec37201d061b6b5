"""Pure control: decisions from observations (re-planning, later adaptive batch and scaling)."""

from shoal.control.rebalance import Rebalancer, SpeedEstimator

__all__ = ["Rebalancer", "SpeedEstimator"]
