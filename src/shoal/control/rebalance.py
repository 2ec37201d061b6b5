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
recomputed step. An adaptive batch changes M between steps (`resize`: re-plan now, measurements
kept); the batch policy's throughput model (`throughput_model`) is built from priors only, so
every layout decides the same batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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

    def resize(self, num_micro_batches: int) -> Plan:
        """A new global batch of `num_micro_batches`: re-plan now with the current fitted
        speeds (the measurements are per micro-batch, so they stay valid)."""
        if num_micro_batches < 1:
            raise ValueError("num_micro_batches must be >= 1")
        self.num_micro_batches = num_micro_batches
        self._plan = self._replan()
        return self._plan

    def throughput_model(
        self, micro_batch_size: int, priors_s: Sequence[float], step_overhead_s: float = 0.0
    ) -> Callable[[int], float]:
        """Samples/s at global batch B on workers of `priors_s` seconds per micro-batch: the
        step-time model's split and makespan (+ a fixed per-step overhead). Built from priors,
        never from this group's measurements, so every layout gets the same model and a batch
        decision made with it is layout-invariant (the runtime passes its reference placement's
        priors). No caps: the memory cap is the policy's, not the model's."""
        priors = list(priors_s)
        seconds = step_time.estimate_seconds([None] * len(priors), priors)
        memo: dict[int, float] = {}

        def samples_per_s(batch: int) -> float:
            m = max(1, -(-int(batch) // micro_batch_size))
            if m not in memo:
                plan = step_time.split(m, seconds)
                memo[m] = (
                    m * micro_batch_size / step_time.step_seconds(plan, seconds, step_overhead_s)
                )
            return memo[m]

        return samples_per_s

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
