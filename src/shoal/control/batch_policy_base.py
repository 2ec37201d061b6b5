"""What every adaptive-batch policy shares: the runtime's contract with it, and its common base.

After every step each worker calls `policy.decide(stats, context)` with the same `StepStats`
(exact, layout-invariant) and the same `BatchContext` (a pure throughput model of the run's
reference placement), so every worker chooses the same next global batch at the same step with
no extra message. A policy is a small state machine whose state (smoothed statistics, the batch
trajectory, the learning-rate factor) is JSON-safe and rides in the training state. This module
owns that contract (`BatchContext`, the `BatchPolicy` protocol, decision steps, the bounds) and
`PolicyBase`, the noise estimate, trajectory, learning-rate scaling and state every policy
builds on; the policies themselves and `make_policy` are `control.batch_policy`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from shoal.control.gradstats import NoiseScale, StepStats
from shoal.digits import ascii_digits
from shoal.errors import UserError
from shoal.perf.goodput import gain


@dataclass(frozen=True)
class BatchContext:
    micro_batch_size: int
    bounds: tuple[int, int]  # (low, high) global batch in samples, multiples of b
    cap_micro_batches: int | None  # most micro-batches the current workers hold; None: no cap
    throughput: Callable[[int], float]  # samples/s at global batch B: pure, layout-invariant
    initial_batch: int  # the job's global_batch_size (B0)


class BatchPolicy(Protocol):
    name: str
    every: int
    uses_throughput: bool

    def decide(self, stats: StepStats, context: BatchContext) -> int: ...
    def settings(self) -> dict: ...
    def lr_factor(self, batch: int, context: BatchContext) -> float: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


def parse_bounds(text: str) -> tuple[int, int]:
    """'64:2048' -> (64, 2048)."""
    parts = str(text).split(":")
    try:
        low, high = (int(ascii_digits(p)) for p in parts)
    except ValueError:
        raise UserError(f"batch bounds {text!r} are not LOW:HIGH in samples") from None
    if low < 1:
        raise UserError(f"batch bounds {text!r}: the lower bound must be >= 1")
    return low, high


def is_decision_step(step: int, every: int) -> bool:
    """Whether the step just finished is a decision step: the `every`-th, 2*`every`-th, ..."""
    return (step + 1) % every == 0


def needs_similarity(policy: BatchPolicy, step: int) -> bool:
    """Whether the runtime measures the half-sum cosine on this step: on decision steps, for
    every policy but `fixed` (whose runs keep the plain step: the feature is off)."""
    return policy.name != "fixed" and is_decision_step(step, policy.every)


def within_bounds(batch: float, context: BatchContext, bounds: tuple[int, int] | None) -> int:
    """`batch` rounded to a whole number of micro-batches, inside both bounds and the cap."""
    b = context.micro_batch_size
    low, high = context.bounds
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    m_low, m_high = max(1, -(-low // b)), max(1, high // b)
    if context.cap_micro_batches is not None:
        m_high = min(m_high, context.cap_micro_batches)
    m = min(max(round(batch / b), m_low), m_high)
    return max(1, m) * b


class PolicyBase:
    """What every policy shares: the noise estimate, the trajectory, LR scaling, state."""

    name = ""
    options: dict[str, type] = {}
    uses_throughput = False  # whether its decisions read the context's throughput model

    def __init__(
        self,
        micro_batch_size: int,
        bounds: tuple[int, int] | None,
        every: int,
        lr_scaling: str,
        smoothing: float = 0.9,
    ) -> None:
        self.micro_batch_size = micro_batch_size
        self.bounds = bounds
        self.every = every
        self.lr_scaling = lr_scaling
        self.noise = NoiseScale(smoothing)
        self.trajectory: list[list[int]] = []  # [first step, batch] at every change
        self.last_lr_factor = 1.0

    def decide(self, stats: StepStats, context: BatchContext) -> int:
        self.noise.update(stats)
        self._observe(stats)
        current = stats.global_batch_size
        want = self._choose(stats, context, current)
        batch = within_bounds(want, context, self.bounds)
        if not self.trajectory or self.trajectory[-1][1] != batch:
            self.trajectory.append([stats.step + 1, batch])
        self.last_lr_factor = self.lr_factor(batch, context)
        return batch

    def _observe(self, stats: StepStats) -> None:
        """Fold a step into the policy's own state (the loss, for schedules)."""

    def _choose(self, stats: StepStats, context: BatchContext, current: int) -> float:
        return current

    def lr_factor(self, batch: int, context: BatchContext) -> float:
        ratio = batch / context.initial_batch
        if self.lr_scaling == "linear":
            return ratio
        if self.lr_scaling == "sqrt":
            return math.sqrt(ratio)
        if self.lr_scaling == "adascale":
            sqr, var = self.noise.grad_sqr, self.noise.grad_var
            if sqr is None or var is None:
                return 1.0  # nothing measured yet: the unscaled rate
            return gain(batch, context.initial_batch, sqr, var / context.initial_batch)
        return 1.0

    def settings(self) -> dict:
        """What decides this policy's batches and learning-rate factors besides its context
        and bounds: its name, decision interval, scaling rule and knobs, defaults included, as
        plain JSON values (the job fingerprint's: equivalent spellings give equal settings)."""
        return {
            "name": self.name,
            "every": int(self.every),
            "lr_scaling": self.lr_scaling,
            "smoothing": float(self.noise.smoothing),
            **self._knobs(),
        }

    def _knobs(self) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {
            "name": self.name,
            "noise": self.noise.state_dict(),
            "trajectory": [list(x) for x in self.trajectory],
            "lr_factor": self.last_lr_factor,
            **self._extra_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("name") != self.name:
            raise UserError(f"saved batch policy {state.get('name')!r} is not {self.name!r}")
        self.noise.load_state_dict(state["noise"])
        self.trajectory = [[int(s), int(b)] for s, b in state["trajectory"]]
        self.last_lr_factor = float(state["lr_factor"])
        self._load_extra(state)

    def _extra_state(self) -> dict:
        return {}

    def _load_extra(self, state: dict) -> None:
        pass
