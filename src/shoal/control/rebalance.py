"""Re-planning from measured speeds.

Each worker's time per micro-batch is measured online and smoothed (the median of its last
few observations, which a single slow step on a shared host does not move); every few steps
the plan is recomputed from the smoothed times. Every worker runs
this with the same observations (they travel in the step's one collective), so all agree on
the next plan without another message. Re-planning only moves work: it never changes the math.

A worker that has not been measured yet (new, or given nothing) is estimated from its prior
(the catalog's relative speed), scaled to seconds by the workers that were measured. A worker
left idle for `stale_after` steps forgets its measurement, so one slow spell on a shared
machine cannot starve it for the rest of the run: it is handed work again and re-measured.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from shoal.plan import Plan, plan_micro_batches


@dataclass
class SpeedEstimator:
    prior_s: list[float]  # relative time per micro-batch (any unit), one per worker
    window: int = 5  # observations whose median is the estimate
    stale_after: int = 20  # idle steps after which a measurement is forgotten
    history: list[deque] = field(init=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be >= 1")
        self.history = [deque(maxlen=self.window) for _ in self.prior_s]
        self.idle_steps = [0] * len(self.prior_s)

    @property
    def measured_s(self) -> list[float | None]:
        return [statistics.median(h) if h else None for h in self.history]

    def observe_idle(self, rank: int) -> None:
        self.idle_steps[rank] += 1
        if self.idle_steps[rank] >= self.stale_after:
            self.history[rank].clear()
            self.idle_steps[rank] = 0

    def observe(self, rank: int, seconds_per_micro_batch: float) -> None:
        if not (seconds_per_micro_batch > 0 and math.isfinite(seconds_per_micro_batch)):
            return
        self.idle_steps[rank] = 0
        self.history[rank].append(seconds_per_micro_batch)

    def estimates_s(self) -> list[float]:
        measured = self.measured_s
        ratios = [m / p for m, p in zip(measured, self.prior_s, strict=True) if m]
        scale = sum(ratios) / len(ratios) if ratios else 1.0
        return [m if m else p * scale for m, p in zip(measured, self.prior_s, strict=True)]


@dataclass
class Rebalancer:
    num_micro_batches: int
    estimator: SpeedEstimator
    replan_every: int = 5
    caps: Sequence[int | None] | None = None
    warmup_steps: int = 1  # steps whose timings are not learned from

    def __post_init__(self) -> None:
        if self.replan_every < 1:
            raise ValueError("replan_every must be >= 1")
        self.plan = self.current()

    def current(self) -> Plan:
        return plan_micro_batches(self.num_micro_batches, self.estimator.estimates_s(), self.caps)

    def after_step(self, step: int, per_worker_s: Sequence[float | None]) -> Plan:
        """Record this step's measured times; return the plan for the next step."""
        if self.warmup_steps > 0:  # cold caches, first allocations, a recomputed step 0
            self.warmup_steps -= 1
            return self.plan
        for rank, t in enumerate(per_worker_s):
            if t is None:
                self.estimator.observe_idle(rank)
            else:
                self.estimator.observe(rank, t)
        if (step + 1) % self.replan_every == 0:
            self.plan = self.current()
        return self.plan
