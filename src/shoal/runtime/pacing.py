"""Emulated device speed: a slower kind takes `slowdown` times the host's time per micro-batch.

On a CPU host every worker computes at the host's speed. A worker emulating a kind that is
`slowdown` times slower than the fastest kind in the run computes its micro-batches of a step
back to back, then waits until they have taken `slowdown` times the host's time for them:

- The host's time per micro-batch is what the group's fastest worker measured, unpadded, in
  each step (shared through the step's collective), as a median over recent steps. That is
  the pace of the fastest kind in the run, under the same sharing of the host's cores; a
  median ignores the hiccups of a shared machine, which padding would multiply.
- A worker's own compute times are not the yardstick: a process that pauses between
  micro-batches runs the next one 15-20 % slower on a shared virtual machine (the conv net
  here: 2.9 ms after a pause, 2.5 ms back to back), so a worker that computes one or two
  micro-batches a step would emulate a kind slower than the catalog says. For the same
  reason the wait is taken once per step, after the micro-batches, and its end is spun
  rather than slept (see `_wait`).
- While it waits, the worker's host does what a real device's host does while the device
  computes: it reads the micro-batches of its next step (the DDP baseline's slow rank, too,
  reads inside its kind's time). The trainer does that reading itself, between `target_s`
  and `wait_out`: the pacer only keeps the time.
- Until a step has been measured there is no yardstick, and the worker runs at host speed.

A benchmark that compares runs fixes the yardstick instead (`host_s`, or the environment
variable SHOAL_EMULATED_HOST_S for `shoal run`), so that an emulated kind has the same speed
in every run whatever the host's load: pacing against each run's own measurement would make
a K80 slower in a run where the workers contend more for the host's cores.

An emulated cluster's gradient exchange can be slower than loopback's (servers on separate
nodes: Pollux's traces show a step's exchange on three single-GPU nodes at 1.18x (cifar10) to
1.78x (BERT) the compute of its local batch; docs/notes/adaptive-batch.md). `sync_s`
(SHOAL_EMULATED_SYNC_S) adds that time to every step, after the step's collective, on every
worker alike.
"""

from __future__ import annotations

import collections
import statistics
import time
from dataclasses import dataclass, field

WINDOW = 16  # recent steps behind the host-speed estimate
SPIN_S = 0.002  # the end of a wait is spun, not slept (see _wait)


@dataclass
class Pacer:
    slowdown: float = 1.0
    host_s: float | None = None  # a fixed host time per micro-batch; None: measured in the run
    sync_s: float = 0.0  # the emulated cluster's gradient exchange, beyond loopback's, per step
    _recent: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=WINDOW), init=False
    )

    def __post_init__(self) -> None:
        if not self.slowdown >= 1.0:
            raise ValueError(f"slowdown must be >= 1, got {self.slowdown}")
        if self.host_s is not None and not self.host_s > 0:
            raise ValueError(f"host_s must be > 0, got {self.host_s}")
        if not self.sync_s >= 0:
            raise ValueError(f"sync_s must be >= 0, got {self.sync_s}")

    def observe(self, host_s: float) -> None:
        """Record a step's host time per micro-batch (the group's fastest worker's)."""
        if self.slowdown != 1.0:
            self._recent.append(host_s)

    def target_s(self, num_micro_batches: int) -> float | None:
        """This kind's time for `num_micro_batches` micro-batches; None: it runs at the host's
        speed (no slowdown, or no yardstick yet) and nothing is waited out. A fixed yardstick
        paces every kind, the fastest too: a run that fixes the speeds (a benchmark, an
        emulated provider's servers) must not have its fastest kind follow the host's load."""
        if self.host_s is None and (self.slowdown == 1.0 or not self._recent):
            return None  # measured yardstick: the fastest kind is the host's own pace
        host_s = self.host_s or statistics.median(self._recent)
        return self.slowdown * num_micro_batches * host_s

    def wait_out(self, target_s: float, elapsed_s: float) -> float:
        """Wait until work that has taken `elapsed_s` has taken `target_s`; return the longer."""
        if target_s > elapsed_s:
            _wait(target_s - elapsed_s)
        return max(elapsed_s, target_s)

    def exchange(self) -> None:
        """Wait out the emulated exchange: every worker of the step waits the same `sync_s`
        once its collective is done, so the step takes that much longer, and no worker's
        seconds per micro-batch (what the planner and the yardstick measure) include it."""
        if self.sync_s > 0:
            _wait(self.sync_s)

    def pad(self, num_micro_batches: int, elapsed_s: float) -> float:
        """Sleep until `num_micro_batches` micro-batches, computed in `elapsed_s`, have taken
        this kind's time for them; return that time."""
        target = self.target_s(num_micro_batches)
        return elapsed_s if target is None else self.wait_out(target, elapsed_s)


def _wait(seconds: float) -> None:
    """Sleep, then spin for the last SPIN_S: a CPU left idle for a few milliseconds can take
    milliseconds to wake on a virtual machine, and the wait ends where the worker joins the
    step's collective, which would then run that much later. (A GPU worker's host thread
    spins on its stream likewise.)"""
    end = time.perf_counter() + seconds
    if seconds > SPIN_S:
        time.sleep(seconds - SPIN_S)
    while time.perf_counter() < end:
        pass
