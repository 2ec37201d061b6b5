"""The step time of asynchronous parameter-server training, and its fit to measured runs.

Each worker loops: pull the parameters, compute a gradient, push it. Its unloaded cycle is

    T0_i = compute_s[kind_i] + latency_s / P

(the transfer latency is split over the P parameter servers, each holding 1/P of the model).
The parameter servers must also serve every update: one update occupies them for
`ps_service_s / P`, so N workers cannot cycle faster than once per N * ps_service_s / P. The
cycle is the smooth maximum of the two, softened by the step-time jitter (s) of the N updates
the servers see per cycle, which adds up as sigma * sqrt(N):

    e = the excess with S_P * sum_i 1 / (T0_i + e) = 1   (homogeneous: e = N * S_P - T0)
    T_i = T0_i + e / 2 + sqrt(e^2 / 4 + jitter_s^2 * N)

With no parameter server (one worker updating its own parameters, the paper's single-GPU runs)
the step is compute_s + local_update_s. This is why a V100 is far less than its compute ratio
faster than a K80 here: its compute is short, so the servers' share of the cycle dominates
and a few V100s already saturate one server.

Every parameter comes from `fit`, a least-squares fit of log durations to measured runs
(`shoal.sim.transient_data`); nothing is taken from the paper's text. A kind with no fitted
compute time gets one from the device table: its position between the fitted kinds on Gavel's
measured steps/s of ResNet-18 at batch 128, the workload nearest to the paper's ResNet-32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from shoal.errors import UserError
from shoal.perf.devices import load_devices
from shoal.sim.transient_data import TOTAL_STEPS, Measurement

# the Gavel-measured workload nearest to ResNet-32 on CIFAR-10 at batch 128
PROXY_WORKLOAD = "ResNet-18 (batch size 128)"


@dataclass(frozen=True)
class PSModel:
    compute_s: dict[str, float] = field(hash=False)  # per GPU kind, seconds per step
    latency_s: float  # transfer of one step's pull + push through one parameter server
    ps_service_s: float  # time one update occupies one parameter server
    jitter_s: float  # step-time jitter that softens the saturation knee
    local_update_s: float  # a lone worker applying its own update (no parameter server)

    def __post_init__(self) -> None:
        values = [*self.compute_s.values(), self.latency_s, self.ps_service_s, self.jitter_s]
        if min(values + [self.local_update_s]) < 0 or min(self.compute_s.values()) <= 0:
            raise ValueError("PS model times must be >= 0 (compute > 0)")

    def compute(self, kind: str) -> float:
        try:
            return self.compute_s[kind]
        except KeyError:
            known = ", ".join(sorted(self.compute_s))
            raise UserError(
                f"the PS model has no compute time for {kind!r} (has {known})"
            ) from None

    def step_times_s(self, kinds: Sequence[str], num_ps: int) -> list[float]:
        """Seconds per step of each worker of a cluster of `kinds` sharing `num_ps` servers."""
        if not kinds:
            return []
        if num_ps == 0:
            if len(kinds) > 1:
                raise UserError("more than one worker needs a parameter server")
            return [self.compute(kinds[0]) + self.local_update_s]
        base = [self.compute(k) + self.latency_s / num_ps for k in kinds]
        excess = _excess(base, self.ps_service_s / num_ps)
        wait = excess / 2 + math.sqrt(excess**2 / 4 + self.jitter_s**2 * len(kinds))
        return [t + wait for t in base]

    def steps_per_s(self, kinds: Sequence[str], num_ps: int) -> float:
        return sum(1.0 / t for t in self.step_times_s(kinds, num_ps))

    def duration_s(self, m: Measurement) -> float:
        """Predicted seconds for measurement `m`'s cluster to run its 64,000 steps."""
        return TOTAL_STEPS / self.steps_per_s([m.kind] * m.num_workers, m.num_ps)

    def with_kind_from_devices(self, kind: str) -> PSModel:
        """This model plus `kind`, placed between the fitted kinds by Gavel's measured speeds."""
        fitted = sorted(self.compute_s)
        if len(fitted) < 2:
            raise UserError("placing a kind by the device table needs two fitted kinds")
        devices = load_devices()

        def log_speed(name: str) -> float:
            speeds = devices.kind(name).throughput_steps_per_s
            if PROXY_WORKLOAD not in speeds:
                raise UserError(f"no measured {PROXY_WORKLOAD} speed for kind {name!r}")
            return math.log(speeds[PROXY_WORKLOAD])

        # least-squares line log(compute) = a + b * log(speed) through the fitted kinds
        xs = [log_speed(k) for k in fitted]
        ys = [math.log(self.compute_s[k]) for k in fitted]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
        b = sxy / sum((x - mx) ** 2 for x in xs)
        value = math.exp(my + b * (log_speed(kind) - mx))
        return replace(self, compute_s={**self.compute_s, kind: value})


def _excess(base: list[float], service_s: float) -> float:
    """e with service_s * sum(1 / (b + e)) = 1: the servers' overload per cycle (may be < 0)."""
    if max(base) == min(base):  # one kind: closed form
        return len(base) * service_s - base[0]
    lo, hi = -min(base) * (1 - 1e-12), len(base) * service_s
    for _ in range(60):  # bisection on a decreasing function
        mid = 0.5 * (lo + hi)
        if service_s * sum(1.0 / (b + mid) for b in base) > 1.0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def fit(rows: Sequence[Measurement]) -> PSModel:
    """Least squares on log(predicted / measured mean duration), one residual per row."""
    from scipy.optimize import least_squares  # optional heavy import, only when fitting

    kinds = sorted({m.kind for m in rows})
    lone = any(m.num_ps == 0 for m in rows)

    def model(p) -> PSModel:
        values = [float(v) for v in p]
        return PSModel(dict(zip(kinds, values[: len(kinds)], strict=True)), *values[len(kinds) :])

    def residuals(p) -> list[float]:
        m = model(p)
        return [math.log(m.duration_s(r) / r.mean_s) for r in rows]

    # start from each kind's measured seconds per step per worker
    start = [
        0.9 * min(r.mean_s * r.num_workers / TOTAL_STEPS for r in rows if r.kind == k)
        for k in kinds
    ]
    start += [0.02, 0.02, 0.01, 0.02 if lone else 0.0]
    upper = [10.0] * len(kinds) + [1.0, 1.0, 1.0, 1.0 if lone else 1e-12]
    result = least_squares(residuals, start, bounds=([1e-6] * len(kinds) + [0.0] * 4, upper))
    fitted = model(result.x)
    # with no lone-worker row the local update is not identified: say so with an exact 0
    return fitted if lone else replace(fitted, local_update_s=0.0)
