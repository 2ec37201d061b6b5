"""Emulated device speed: a slower kind pads each micro-batch up to that kind's time.

On a CPU host every worker computes at the host's speed; a worker emulating a kind that is
`slowdown` times slower than the fastest kind in the run sleeps until the micro-batch has
taken `slowdown` times the host's own time for it. The host's time is the fastest compute
time seen so far (the uncontended speed): padding to a multiple of each measured time would
multiply every hiccup of a shared machine by the slowdown. Sleeping leaves the cores to the
other workers.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class Pacer:
    slowdown: float = 1.0
    _best_s: float = field(default=math.inf, init=False)

    def __post_init__(self) -> None:
        if not self.slowdown >= 1.0:
            raise ValueError(f"slowdown must be >= 1, got {self.slowdown}")

    def pad(self, compute_s: float) -> float:
        """Sleep until the micro-batch has taken this kind's time; return the time it took."""
        if self.slowdown == 1.0:
            return compute_s
        self._best_s = min(self._best_s, compute_s)
        extra = self.slowdown * self._best_s - compute_s
        if extra > 0:
            time.sleep(extra)
        return max(compute_s, self.slowdown * self._best_s)
