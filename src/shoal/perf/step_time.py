"""The step-time model: the one model of how long a synchronous data-parallel step takes.

A step's M micro-batches are split over the workers by `plan_micro_batches` (the only split in
shoal: min-makespan, ties to the lower rank); worker i takes t_i seconds per micro-batch, so
the step takes the makespan max_i n_i * t_i plus the time to synchronise gradients.

The per-worker t_i come from one of two sides of the same model:

- *fitted from measurements* (the live controller, `control.rebalance`): `SpeedFit` keeps each
  worker's observed seconds per micro-batch, keyed by worker id so a measurement survives a
  regroup; the estimate is the median of the last `window` observations (one slow step on a
  shared host does not move it), and a worker left idle for `stale_after` steps forgets its
  measurement so one slow spell cannot starve it for the rest of the run.
- *evaluated from the shipped profiles* (the simulator, `perf.goodput`): per-kind seconds per
  unit of work are 1 / the kind's speed for the application (`perf.devices`), the sync term is
  the profile's.

Either way the estimate for a worker with no measurement is its prior scaled by the measured
workers (`estimate_seconds`: prior x mean(measured/prior)), and the split is `split`.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from shoal.plan import Plan, makespan, plan_micro_batches


def estimate_seconds(measured_s: Sequence[float | None], priors_s: Sequence[float]) -> list[float]:
    """Seconds per micro-batch per worker: measured where known, else prior x the measured scale.

    The scale is the mean of measured/prior over the measured workers (1 when none is measured,
    so priors must then already be in seconds -- or in any common unit, for a pure split).
    """
    ratios = [m / p for m, p in zip(measured_s, priors_s, strict=True) if m]
    scale = sum(ratios) / len(ratios) if ratios else 1.0
    return [m if m else p * scale for m, p in zip(measured_s, priors_s, strict=True)]


def split(
    num_micro_batches: int, seconds_s: Sequence[float], caps: Sequence[int | None] | None = None
) -> Plan:
    """The within-job split: `plan_micro_batches`, the only one (named here so both drivers share
    one entry point into the model)."""
    return plan_micro_batches(num_micro_batches, seconds_s, caps)


def step_seconds(plan: Plan, seconds_s: Sequence[float], sync_s: float = 0.0) -> float:
    """A step's time under `plan`: the split's makespan plus the synchronisation term."""
    return makespan(plan.counts, seconds_s) + sync_s


def units_speed(units: int, speeds: Sequence[float]) -> float:
    """Throughput, in units of `speeds`, of `units` indivisible units of work split over workers
    of `speeds` (work per second each): units / the makespan of the best integer split."""
    seconds = estimate_seconds([None] * len(speeds), [1.0 / s for s in speeds])
    plan = split(units, seconds)
    return units / step_seconds(plan, seconds)


@dataclass
class SpeedFit:
    """Per-worker seconds per micro-batch fitted from online observations, keyed by worker id."""

    window: int = 5  # observations whose median is the estimate
    stale_after: int = 20  # idle steps after which a measurement is forgotten
    history: dict[str, deque] = field(init=False, default_factory=dict)
    idle_steps: dict[str, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be >= 1")

    def keep_only(self, workers: Sequence[str]) -> None:
        """Forget the workers that left (a worker that returns later is measured anew)."""
        for gone in set(self.history) - set(workers):
            del self.history[gone]
            self.idle_steps.pop(gone, None)

    def measured_s(self, worker: str) -> float | None:
        h = self.history.get(worker)
        return statistics.median(h) if h else None

    def observe_idle(self, worker: str) -> None:
        self.idle_steps[worker] = self.idle_steps.get(worker, 0) + 1
        if self.idle_steps[worker] >= self.stale_after:
            self.history.pop(worker, None)
            self.idle_steps[worker] = 0

    def observe(self, worker: str, seconds_per_micro_batch: float) -> None:
        if not (seconds_per_micro_batch > 0 and math.isfinite(seconds_per_micro_batch)):
            return
        self.idle_steps[worker] = 0
        self.history.setdefault(worker, deque(maxlen=self.window)).append(seconds_per_micro_batch)

    def estimates_s(self, workers: Sequence[str], priors_s: Sequence[float]) -> list[float]:
        return estimate_seconds([self.measured_s(w) for w in workers], priors_s)

    def state_dict(self) -> dict:
        """Plain values (JSON-safe): the observations and idle counts per worker id."""
        history = {w: list(h) for w, h in self.history.items()}
        return {"history": history, "idle_steps": dict(self.idle_steps)}

    def load_state_dict(self, state: dict) -> None:
        self.history = {w: deque(h, maxlen=self.window) for w, h in state["history"].items()}
        self.idle_steps = dict(state["idle_steps"])
