"""Emulated device speed: a slower kind pads each micro-batch's measured compute time.

On a CPU host every worker computes at the host's speed; a worker emulating a kind that is
`slowdown` times slower than the fastest kind in the run sleeps (slowdown - 1) times the
measured compute time after each micro-batch, so its wall time per micro-batch is what that
kind would take. Sleeping leaves the cores to the other workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Pacer:
    slowdown: float = 1.0

    def __post_init__(self) -> None:
        if not self.slowdown >= 1.0:
            raise ValueError(f"slowdown must be >= 1, got {self.slowdown}")

    def pad(self, compute_s: float) -> float:
        """Sleep so that the micro-batch took slowdown * compute_s; return that time."""
        extra = compute_s * (self.slowdown - 1.0)
        if extra > 0:
            time.sleep(extra)
        return compute_s * self.slowdown
