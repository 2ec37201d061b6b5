"""What a live `--provider` run measures of itself: the numbers its scaler and its replay use.

Everything is kept in emulated seconds (wall seconds x `--time-scale`), as medians of the last
WINDOW measurements (one slow step on a shared host moves nothing):
- the host's seconds per micro-batch on the fastest kind: each step line's fastest share,
  divided by its kind's slowdown (before the first step line, the launcher's own estimate,
  `hostspeed.estimate_host_s`);
- the step overhead: the step time beyond the slowest share's compute;
- the change cost: what a regroup costs beyond the step it ends with (recover lines);
- the join delay: from a server's request to its worker's admission;
- the global batch, as (from step, batch) pieces.

They feed the scaler through the shared step-time model (`control.mix_model.profile_step_time`,
which `sim.scenario.step_time_model` replays) and go to `OUT/scenario.json` at the end, so
that `shoal simulate --scenario` replays the run: `runmodel.RunModel` hands them on.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Mapping

from shoal.control.mix_model import profile_step_time
from shoal.metrics.training import MembershipEvent, StepLine
from shoal.sim.scenario import join_delay_at

WINDOW = 20  # measurements kept
MEASURED = 3  # step lines before the first decision: with none, the overhead would be 0


class Measurements:
    """The run's own measurements so far (see the module's docstring)."""

    def __init__(
        self,
        scale: float,
        slowdown: Mapping[str, float],
        micro_batch_size: int,
        global_batch_size: int,
        host_s: float | None,
        startup_s: float,
    ) -> None:
        self.scale, self.slowdown = scale, slowdown
        self.micro_batch_size = micro_batch_size
        self.configured_startup_s = startup_s
        self.batch = [(0, global_batch_size)]  # (from step, global batch) pieces
        self.host = deque([host_s * scale] if host_s else [], WINDOW)
        self.overhead: deque[float] = deque(maxlen=WINDOW)
        self.changes: deque[float] = deque(maxlen=WINDOW)
        self.last_step_wall_s: float | None = None  # the last step line's step time (wall s)
        self.joins: list[tuple[float, float]] = []  # (admitted at, request -> admission delay)

    @property
    def ready(self) -> bool:
        """Enough step lines for a decision."""
        return len(self.overhead) >= MEASURED

    def host_s(self) -> float:
        return _median(self.host)

    def overhead_s(self) -> float:
        return _median(self.overhead)

    def change_cost_s(self) -> float:
        return _median(self.changes)

    def startup_s(self) -> float:
        """The start-up the scaler counts and the replay uses: --startup, or the measured
        request -> admission delay (`join_delay_at`) when that is longer."""
        return max(self.configured_startup_s, join_delay_at(self.joins))

    def step_time(self, slowdowns: Mapping[str, float]) -> Callable[..., float]:
        """(GPUs per kind, global batch) -> emulated seconds per step, as measured so far."""
        return profile_step_time(self.micro_batch_size, self.host_s(), slowdowns, self.overhead_s())

    def step(self, rec: StepLine) -> bool:
        """A step line: host seconds per micro-batch, overhead, the batch. Returns whether the
        global batch changed."""
        self.last_step_wall_s = rec.step_time_s
        shares = [s for s in rec.workers if s.micro_batch_time_s and s.device and s.micro_batches]
        if shares:
            self.host.append(
                min(s.micro_batch_time_s / self.slowdown.get(s.device, 1.0) for s in shares)
                * self.scale
            )
            compute = max(s.micro_batches * s.micro_batch_time_s for s in shares)
            if rec.step_time_s is not None:
                self.overhead.append(max(0.0, rec.step_time_s - compute) * self.scale)
        if rec.global_batch_size and rec.global_batch_size != self.batch[-1][1]:
            self.batch.append((rec.step, rec.global_batch_size))
            return True
        return False

    def recovered(self, rec: MembershipEvent) -> None:
        """A recover line: the change cost.

        Its `recovery_time_s` runs from the old group's end to the END of the new group's
        first step (rank 0 writes it after that step's line), so it holds a whole step of
        training that counts as progress. The change cost is what is left: the regroup and the
        state's transfer (0.02-0.07 wall s in the spot bench's runs, beside steps of 0.85 and
        1.7 s). Taken whole, every change paused the simulated run and the scaler's prediction
        for one more step than it costs."""
        if rec.recovery_time_s is not None:
            pause = max(0.0, rec.recovery_time_s - (self.last_step_wall_s or 0.0))
            self.changes.append(pause * self.scale)

    def joined(self, at_s: float, requested_s: float) -> None:
        """A requested server's worker was admitted at emulated `at_s`. The emulation's own
        process start-up (importing torch, 5-8 wall s on a loaded 2-core host) and the wait
        for the group's next step boundary can make the delay longer than --startup; the
        scaler then counts the delay the run actually has (`startup_s`) and the replay admits
        its servers after it (`Scenario.join_delay_s`; a lease's lifetime still runs from its
        ready_s, as the provider drew it)."""
        self.joins.append((at_s, max(0.0, at_s - requested_s)))


def _median(values) -> float:
    """A measurement's median so far (0 before the first: the scaler's prior is no cost)."""
    return statistics.median(values) if values else 0.0
