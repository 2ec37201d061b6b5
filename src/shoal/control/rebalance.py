"""Re-planning from measured speeds.

Each worker's time per micro-batch is measured online and smoothed (an exponential moving
average); every few steps the plan is recomputed from the smoothed times. Every worker runs
this with the same observations (they travel in the step's one collective), so all agree on
the next plan without another message. Re-planning only moves work: it never changes the math.

A worker that has not been measured yet (new, or given nothing) is estimated from its prior
(the catalog's relative speed), scaled to seconds by the workers that were measured. A worker
left idle for `stale_after` steps forgets its measurement, so one slow spell on a shared
machine cannot starve it for the rest of the run: it is handed work again and re-measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from shoal.plan import Plan, plan_micro_batches


@dataclass
class SpeedEstimator:
    prior_s: list[float]  # relative time per micro-batch (any unit), one per worker
    smoothing: float = 0.3  # weight of the newest observation
    stale_after: int = 20  # idle steps after which a measurement is forgotten
    measured_s: list[float | None] = field(init=False)

    def __post_init__(self) -> None:
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self.measured_s = [None] * len(self.prior_s)
        self.idle_steps = [0] * len(self.prior_s)

    def observe_idle(self, rank: int) -> None:
        self.idle_steps[rank] += 1
        if self.idle_steps[rank] >= self.stale_after:
            self.measured_s[rank], self.idle_steps[rank] = None, 0

    def observe(self, rank: int, seconds_per_micro_batch: float) -> None:
        if not (seconds_per_micro_batch > 0 and math.isfinite(seconds_per_micro_batch)):
            return
        self.idle_steps[rank] = 0
        old = self.measured_s[rank]
        a = self.smoothing
        self.measured_s[rank] = (
            seconds_per_micro_batch if old is None else a * seconds_per_micro_batch + (1 - a) * old
        )

    def estimates_s(self) -> list[float]:
        ratios = [m / p for m, p in zip(self.measured_s, self.prior_s, strict=True) if m]
        scale = sum(ratios) / len(ratios) if ratios else 1.0
        return [m if m else p * scale for m, p in zip(self.measured_s, self.prior_s, strict=True)]


@dataclass
class Rebalancer:
    num_micro_batches: int
    estimator: SpeedEstimator
    replan_every: int = 5
    caps: Sequence[int | None] | None = None

    def __post_init__(self) -> None:
        if self.replan_every < 1:
            raise ValueError("replan_every must be >= 1")
        self.plan = self.current()

    def current(self) -> Plan:
        return plan_micro_batches(self.num_micro_batches, self.estimator.estimates_s(), self.caps)

    def after_step(self, step: int, per_worker_s: Sequence[float | None]) -> Plan:
        """Record this step's measured times; return the plan for the next step."""
        for rank, t in enumerate(per_worker_s):
            if t is None:
                self.estimator.observe_idle(rank)
            else:
                self.estimator.observe(rank, t)
        if (step + 1) % self.replan_every == 0 or step == 0:
            self.plan = self.current()
        return self.plan
