"""Adaptive global-batch policies: pure decisions from exact gradient statistics.

Each policy is a `control.batch_policy_base.PolicyBase` (the contract with the runtime, the
noise estimate, the trajectory, learning-rate scaling and state live there); `make_policy`
builds one by name from typed or string options.

Policies (all decide a multiple of the micro-batch size b, inside the bounds and the cap):
- `fixed`: the job's batch (capped when the workers cannot hold it).
- `jabas` (JABAS, EuroSys'25): every p steps, grow the batch by (1 + alpha) when the half-batch
  gradient cosine is below gamma (the two halves disagree: noise dominates), shrink by
  (1 - alpha) when above; snapped to whole micro-batches, moving at least one micro-batch.
- `pollux` (Pollux, OSDI'21): every p steps, the batch maximising goodput = throughput(B) x
  statistical efficiency(B), the efficiency from the smoothed noise scale
  (`perf.goodput.gain`), over the multiples of b (a geometric grid of them when there are many).
- `schedule`: a ramp, by step (`ramp=256@0,512@200`: 256 from step 0, 512 from step 200) or by
  smoothed loss (`ramp_loss=256@inf,512@1.0`: 512 once the loss is <= 1.0); never moves back.
- `shoal`: pollux's goodput with the noise scale multiplied by `critical_scale` (adaptive
  optimizers tolerate a larger batch than the SGD noise scale says), a switch only when it gains
  at least `min_gain` (no thrash on a noisy estimate), and at most a `max_growth` factor per
  decision (a new batch is measured before the next jump).
Learning-rate scaling vs the job's batch B0: none, linear (B/B0), sqrt, adascale (Pollux's gain
r(B/B0) from the noise statistics).
"""

from __future__ import annotations

import math

from shoal.control.batch_policy_base import (
    BatchContext,
    BatchPolicy,
    PolicyBase,
    is_decision_step,
    within_bounds,
)
from shoal.digits import ascii_digits
from shoal.errors import UserError
from shoal.perf.goodput import gain

POLICIES: tuple[str, ...] = ("fixed", "jabas", "pollux", "schedule", "shoal")
LR_SCALINGS: tuple[str, ...] = ("none", "linear", "sqrt", "adascale")
FLOAT_SLACK = 1e-9  # in micro-batches: rounding noise of B * (1 +- alpha) / b


class FixedPolicy(PolicyBase):
    name = "fixed"

    def _choose(self, stats, context, current):
        return context.initial_batch  # back to B0 once the workers can hold it again


class JabasPolicy(PolicyBase):
    name = "jabas"
    options = {"gamma": float, "alpha": float, "smoothing": float}

    def __init__(self, *args, gamma: float = 0.1, alpha: float = 0.1, **kw) -> None:
        super().__init__(*args, **kw)
        if not -1.0 < gamma < 1.0:
            raise UserError(f"target similarity gamma={gamma} is outside (-1, 1)")
        if not 0.0 < alpha < 1.0:
            raise UserError(f"batch adjust rate alpha={alpha} is outside (0, 1)")
        self.gamma, self.alpha = gamma, alpha

    def _knobs(self):
        return {"gamma": float(self.gamma), "alpha": float(self.alpha)}

    def _choose(self, stats, context, current):
        if not is_decision_step(stats.step, self.every):
            return current
        b, m = context.micro_batch_size, stats.num_micro_batches
        if m < 2:  # one micro-batch has no halves: grow to the smallest batch that has them
            return 2 * b
        if stats.similarity is None:
            return current
        # FLOAT_SLACK: 320 * 1.1 / 32 is 11.000000000000002 in floats, and must not become 12
        if stats.similarity < self.gamma:  # halves disagree: noise dominates, grow
            return max(math.ceil(current * (1 + self.alpha) / b - FLOAT_SLACK), m + 1) * b
        if stats.similarity > self.gamma:  # halves agree: a smaller batch suffices
            return min(math.floor(current * (1 - self.alpha) / b + FLOAT_SLACK), m - 1) * b
        return current


class PolluxPolicy(PolicyBase):
    name = "pollux"
    options = {"candidates": int, "min_gain": float, "smoothing": float}
    uses_throughput = True

    def __init__(self, *args, candidates: int = 50, min_gain: float = 1.0, **kw) -> None:
        super().__init__(*args, **kw)
        if candidates < 1:
            raise UserError(f"candidates={candidates} must be >= 1")
        if min_gain < 1.0:
            raise UserError(f"min_gain={min_gain} must be >= 1")
        self.candidates, self.min_gain = candidates, min_gain
        self.critical_scale, self.max_growth = 1.0, math.inf

    def _knobs(self):  # shoal's too: its critical_scale and max_growth are pollux's 1 and inf
        return {
            "candidates": int(self.candidates),
            "min_gain": float(self.min_gain),
            "critical_scale": float(self.critical_scale),
            "max_growth": float(self.max_growth),
        }

    def _choose(self, stats, context, current):
        if not is_decision_step(stats.step, self.every):
            return current
        sqr, var = self.noise.grad_sqr, self.noise.grad_var
        if sqr is None or var is None:
            return current
        return self.best(context, sqr, var * self.critical_scale, current)

    def goodput(self, batch: int, context: BatchContext, grad_sqr: float, grad_var: float):
        """throughput(B) x efficiency(B) (samples/s that count): Pollux's r(S)/S with S=B/B0;
        `grad_var` is tr(Sigma) per sample, Pollux's per-B0 variance is grad_var / B0."""
        b0 = context.initial_batch
        eff = gain(batch, b0, grad_sqr, grad_var / b0) * b0 / batch
        return context.throughput(batch) * eff

    def candidate_batches(self, context: BatchContext, current: int) -> list[int]:
        """Multiples of b inside bounds, cap and the growth limit; a geometric grid of
        `candidates` + 1 of them (snapped, deduplicated) when there are more."""
        low = within_bounds(context.bounds[0], context, self.bounds)
        high = within_bounds(context.bounds[1], context, self.bounds)
        b = context.micro_batch_size
        if math.isfinite(self.max_growth):  # at least one micro-batch either way
            low = max(
                low, within_bounds(min(current / self.max_growth, current - b), context, None)
            )
            high = min(
                high, within_bounds(max(current * self.max_growth, current + b), context, None)
            )
        if (high - low) // b + 1 <= self.candidates + 1:
            return list(range(low, high + 1, b))
        grid = [round(low * (high / low) ** (i / self.candidates) / b) * b for i in range(
            self.candidates + 1
        )]  # fmt: skip
        return list(dict.fromkeys(grid))

    def best(self, context: BatchContext, grad_sqr: float, grad_var: float, current: int):
        """The goodput-best candidate (the first on ties); the current batch unless the best
        gains at least `min_gain`."""
        best, best_rate = None, -math.inf
        for batch in self.candidate_batches(context, current):
            rate = self.goodput(batch, context, grad_sqr, grad_var)
            if rate > best_rate:
                best, best_rate = batch, rate
        if self.min_gain > 1.0:
            here = within_bounds(current, context, self.bounds)
            if best_rate < self.min_gain * self.goodput(here, context, grad_sqr, grad_var):
                return here
        return best


class ShoalPolicy(PolluxPolicy):
    name = "shoal"
    options = {**PolluxPolicy.options, "critical_scale": float, "max_growth": float}

    def __init__(
        self, *args, critical_scale=1.0, max_growth=2.0, min_gain=1.05, candidates=50, **kw
    ) -> None:
        super().__init__(*args, candidates=candidates, min_gain=min_gain, **kw)
        if critical_scale <= 0:
            raise UserError(f"critical_scale={critical_scale} must be > 0")
        if max_growth <= 1.0:
            raise UserError(f"max_growth={max_growth} must be > 1")
        self.critical_scale, self.max_growth = critical_scale, max_growth


class SchedulePolicy(PolicyBase):
    name = "schedule"
    options = {"ramp": str, "ramp_loss": str, "smoothing": float, "loss_smoothing": float}

    def __init__(self, *args, ramp=None, ramp_loss=None, loss_smoothing=0.9, **kw) -> None:
        super().__init__(*args, **kw)
        if (ramp is None) == (ramp_loss is None):
            raise UserError("batch policy schedule needs exactly one of ramp= or ramp_loss=")
        self.by_loss = ramp_loss is not None
        self.ramp = _parse_ramp(ramp_loss if self.by_loss else ramp, self.by_loss)
        for batch, _ in self.ramp:
            if batch % self.micro_batch_size:
                raise UserError(
                    f"ramp batch {batch} is not a multiple of the micro-batch size "
                    f"{self.micro_batch_size}"
                )
        if not 0.0 <= loss_smoothing < 1.0:
            raise UserError(f"loss_smoothing={loss_smoothing} is outside [0, 1)")
        self.loss_smoothing = loss_smoothing
        self.loss_avg, self.loss_weight, self.stage = 0.0, 0.0, 0

    def _knobs(self):
        ramp = [[int(b), float(x) if self.by_loss else int(x)] for b, x in self.ramp]
        return {"by_loss": self.by_loss, "ramp": ramp, "loss_smoothing": float(self.loss_smoothing)}

    def _observe(self, stats):
        if math.isfinite(stats.loss):
            theta = self.loss_smoothing
            self.loss_avg = theta * self.loss_avg + (1 - theta) * stats.loss
            self.loss_weight = theta * self.loss_weight + (1 - theta)

    def _choose(self, stats, context, current):
        if self.by_loss:  # advance past every threshold the smoothed loss has reached
            loss = self.loss_avg / self.loss_weight if self.loss_weight > 0 else math.inf
            while self.stage + 1 < len(self.ramp) and loss <= self.ramp[self.stage + 1][1]:
                self.stage += 1
            return self.ramp[self.stage][0]
        nxt = stats.step + 1  # the batch of the step about to run
        starts = [batch for batch, start in self.ramp if start <= nxt]
        return starts[-1] if starts else context.initial_batch

    def _extra_state(self):
        return {"loss_avg": self.loss_avg, "loss_weight": self.loss_weight, "stage": self.stage}

    def _load_extra(self, state):
        self.loss_avg, self.loss_weight = float(state["loss_avg"]), float(state["loss_weight"])
        self.stage = int(state["stage"])


def _parse_ramp(text: str, by_loss: bool) -> list[tuple[int, float]]:
    """'256@0,512@200' -> [(256, 0), (512, 200)]: steps strictly increasing, or (by loss)
    thresholds strictly decreasing (the first may be inf)."""
    key = "ramp_loss" if by_loss else "ramp"
    try:
        pairs = [item.split("@") for item in ascii_digits(str(text)).split(",")]
        ramp = [(int(b), float(x) if by_loss else int(x)) for b, x in pairs]
    except ValueError:
        mark = "LOSS" if by_loss else "STEP"
        raise UserError(f"{key}={text!r} is not BATCH@{mark},...") from None
    marks = [x for _, x in ramp]
    if by_loss:
        ordered = all(a > b for a, b in zip(marks, marks[1:], strict=False))
    else:
        ordered = marks == sorted(set(marks))
    if not ramp or not ordered or any(b < 1 for b, _ in ramp):
        order = "decreasing losses" if by_loss else "increasing steps"
        raise UserError(f"{key}={text!r} needs positive batches at strictly {order}")
    return ramp


_CLASSES = {
    c.name: c for c in (FixedPolicy, JabasPolicy, PolluxPolicy, SchedulePolicy, ShoalPolicy)
}
# the policies whose decisions read the throughput model (--batch-reference, --batch-sync)
THROUGHPUT_POLICIES: tuple[str, ...] = tuple(n for n, c in _CLASSES.items() if c.uses_throughput)


def make_policy(
    name: str,
    *,
    micro_batch_size: int,
    bounds: tuple[int, int] | None,
    every: int = 100,
    lr_scaling: str = "none",
    **params,
) -> BatchPolicy:
    """'fixed' | 'jabas' | 'pollux' | 'schedule' | 'shoal'. Bad input -> shoal.errors.UserError
    (one line): unknown policy, bounds not multiples of b, low > high, a target similarity
    outside (-1, 1), unknown params. lr_scaling: 'none' | 'linear' | 'sqrt' | 'adascale'.
    Params may be strings (from --batch-option KEY=VALUE): each is converted to its type."""
    cls = _CLASSES.get(name)
    if cls is None:
        raise UserError(f"unknown batch policy {name!r} (known: {', '.join(POLICIES)})")
    if lr_scaling not in LR_SCALINGS:
        raise UserError(f"unknown lr scaling {lr_scaling!r} (known: {', '.join(LR_SCALINGS)})")
    if micro_batch_size < 1 or every < 1:
        raise UserError("the micro-batch size and the batch decision interval must be >= 1")
    if bounds is not None:
        low, high = bounds
        if low > high:
            raise UserError(f"batch bounds {low}:{high}: the lower bound is above the upper")
        if low < 1 or low % micro_batch_size or high % micro_batch_size:
            raise UserError(
                f"batch bounds {low}:{high} are not positive multiples of the micro-batch size "
                f"{micro_batch_size}"
            )
    typed = {}
    for key, value in params.items():
        kind = cls.options.get(key)
        if kind is None:
            known = ", ".join(sorted(cls.options)) or "none"
            raise UserError(f"unknown option {key!r} for batch policy {name} (known: {known})")
        try:
            if isinstance(value, str) and kind is not str:  # a number, in ASCII digits
                value = ascii_digits(value)
            typed[key] = kind(value)
        except (TypeError, ValueError):
            raise UserError(f"option {key}={value!r} is not a {kind.__name__}") from None
    return cls(micro_batch_size, bounds, every, lr_scaling, **typed)
