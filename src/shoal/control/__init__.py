"""Pure control: decisions from observations (re-planning, batch size, pricing tier, scaling)."""

from shoal.control.batch_policy import LR_SCALINGS, POLICIES, make_policy
from shoal.control.batch_policy_base import (
    BatchContext,
    BatchPolicy,
    needs_similarity,
    parse_bounds,
)
from shoal.control.gradstats import NoiseScale, StepStats
from shoal.control.rebalance import Rebalancer

__all__ = [
    "LR_SCALINGS",
    "POLICIES",
    "BatchContext",
    "BatchPolicy",
    "NoiseScale",
    "Rebalancer",
    "StepStats",
    "make_policy",
    "needs_similarity",
    "parse_bounds",
]
