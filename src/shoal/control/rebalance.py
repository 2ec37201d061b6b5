"""Re-planning from measured speeds: the live controller's planner.

Each worker's time per micro-batch is measured online and fitted by the shared step-time model
(`shoal.perf.step_time.SpeedFit`: the median of a window, keyed by worker id); every few steps
the plan is recomputed from the fitted times with the model's split. Every worker runs this with
the same observations (they travel in the step's one collective), so all agree on the next plan
without another message. Re-planning only moves work: it never changes the math.

A regroup keeps the measurements of the workers that stay; a newcomer is estimated from its
prior (the device table's relative speed) scaled by the measured workers. Members of a new group
may have measured different things (a newcomer nothing, a worker that joined later less), so the
group first adopts one member's measurements (`state_dict`, sent by the runtime at a regroup).
The first step after a regroup is not learned from: cold caches, first allocations, a
recomputed step.
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal.perf import step_time
from shoal.plan import Plan


class Rebalancer:
    def __init__(
        self,
        num_micro_batches: int,
        replan_every: int = 5,
        *,
        window: int = 5,
        stale_after: int = 20,
    ) -> None:
        if replan_every < 1:
            raise ValueError("replan_every must be >= 1")
        self.num_micro_batches = num_micro_batches
        self.replan_every = replan_every
        self.fit = step_time.SpeedFit(window, stale_after)
        self.regroup(["w0"], [1.0], [None])

    def regroup(
        self, worker_ids: Sequence[str], priors_s: Sequence[float], caps: Sequence[int | None]
    ) -> None:
        """A new group, in rank order. Measurements of workers that stay (same id) are kept;
        a newcomer is estimated from its prior scaled by the measured workers. The first step
        after a regroup is not learned from (warm-up: cold caches, a new group)."""
        if not (len(worker_ids) == len(priors_s) == len(caps)):
            raise ValueError("worker_ids, priors_s and caps need one entry per worker")
        self.worker_ids, self.priors_s = list(worker_ids), list(priors_s)
        self.caps = list(caps)
        self.fit.keep_only(self.worker_ids)
        self.warmup_steps = 1
        self._plan = self._replan()

    def state_dict(self) -> dict:
        """What the group must agree on before it plans: the measurements (JSON-safe)."""
        return self.fit.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.fit.load_state_dict(state)
        self._plan = self._replan()

    @property
    def plan(self) -> Plan:
        return self._plan

    def _replan(self) -> Plan:
        seconds = self.fit.estimates_s(self.worker_ids, self.priors_s)
        return step_time.split(self.num_micro_batches, seconds, self.caps)

    def after_step(self, step: int, seconds_per_micro_batch: Sequence[float | None]) -> Plan:
        """Record a step's per-rank seconds per micro-batch (None: computed nothing); return
        the plan for the next step."""
        if self.warmup_steps > 0:
            self.warmup_steps -= 1
            return self._plan
        for worker, t in zip(self.worker_ids, seconds_per_micro_batch, strict=True):
            if t is None:
                self.fit.observe_idle(worker)
            else:
                self.fit.observe(worker, t)
        if (step + 1) % self.replan_every == 0:
            self._plan = self._replan()
        return self._plan
