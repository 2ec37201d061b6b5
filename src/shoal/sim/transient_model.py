"""The step time of asynchronous parameter-server training, and its fit to measured runs.

Each worker loops: pull the parameters, compute a gradient, push it. Its unloaded cycle is

    T0_i = compute_s[kind_i] + latency_s / P

(the transfer, and an update's own handling, split over the P parameter servers, each holding
1/P of the model). The servers must also take every update, one at a time: an update occupies
them D = ps_service_s / P, so the N workers queue there. The queue is a closed loop (a worker
pushes again only after its last update was applied), and its wait comes from Kingman's
heavy-traffic formula for a single server fed by the N workers' streams:

    w = D * rho / (1 - rho) * (service_sd_s^2 / D^2 + c_a^2) / 2,   T_i = T0_i + w,
    rho = D * sum_i 1 / T_i   (the servers' utilisation),
    c_a^2 = sum_i (cycle_sd_s / T_i)^2 / T_i / sum_i 1 / T_i   (the merged arrivals' burstiness)

solved for the one wait w every worker sees (the servers are shared, whatever the kind). Far
below the servers' bound w is small; near it the wait grows until rho < 1 holds, so N workers
never step faster than the servers take updates (N * D per cycle). Two spreads shape the knee:
how much an update's handling varies (service_sd_s) and how irregularly a worker's cycle
brings it back (cycle_sd_s); a worker with a long cycle (a K80) arrives regularly and queues
little, a fast one (a V100) arrives in bursts. Every update visits all P servers at once
(a fork-join); with the servers handling the same stream of updates their queues move
together, so they are taken as one queue of service D.

With no parameter server (one worker updating its own parameters, the paper's single-GPU runs)
the step is compute_s + local_update_s. This is why a V100 is far less than its compute ratio
faster than a K80 here: its compute is short, so the servers' share of the cycle dominates
and a few V100s already saturate one server.

Every parameter comes from `fit`, a least-squares fit of log steady run times to measured runs
(`shoal.sim.transient_data`); nothing is taken from the paper's text. A measured duration is
that steady time plus the measurement's start offset (the evaluator's poll delay and the
start-up, ~0 on average but +-20 s per run), so `duration_s` adds the offset measured on the
fit's runs: a measurement, not a fitted knob. The structure was chosen
by cross-validation inside the fit data (docs/notes/transient-model.md). A kind with no fitted
compute time gets one from the device table: its position between the fitted kinds on Gavel's
measured steps/s of ResNet-18 at batch 128, the workload nearest to the paper's ResNet-32.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from shoal.errors import UserError
from shoal.perf.devices import load_devices
from shoal.sim.transient_data import TOTAL_STEPS, Measurement

# the Gavel-measured workload nearest to ResNet-32 on CIFAR-10 at batch 128
PROXY_WORKLOAD = "ResNet-18 (batch size 128)"


@dataclass(frozen=True)
class PSModel:
    compute_s: dict[str, float] = field(hash=False)  # per GPU kind, seconds per step
    latency_s: float  # one step's pull + push (and its handling) through one server
    ps_service_s: float  # time one update occupies one parameter server
    service_sd_s: float  # spread of that time from update to update
    cycle_sd_s: float  # spread of one worker's cycle: how irregularly its updates arrive
    local_update_s: float  # a lone worker applying its own update (no parameter server)
    # a measured duration's start offset: its evaluation curve's line at step 0 minus its step-0
    # point (the mean over the fitted runs); part of the paper's Duration, not of training speed
    offset_s: float = 0.0

    def __post_init__(self) -> None:
        values = [*self.compute_s.values(), self.latency_s, self.ps_service_s]
        values += [self.service_sd_s, self.cycle_sd_s]
        if min(values + [self.local_update_s]) < 0 or min(self.compute_s.values()) <= 0:
            raise ValueError("PS model times must be >= 0 (compute > 0)")
        if not math.isfinite(self.offset_s):
            raise ValueError("the PS model's offset must be finite")

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
        by_kind = self.step_times_by_kind(Counter(kinds), num_ps)
        return [by_kind[k] for k in kinds]

    def step_times_by_kind(self, counts: Mapping[str, int], num_ps: int) -> dict[str, float]:
        """Seconds per step of a worker of each kind, `counts[kind]` workers of each sharing
        `num_ps` servers: time linear in the kinds, not the workers (a replay recomputes it at
        each of up to thousands of revocations)."""
        counts = {k: n for k, n in counts.items() if n > 0}
        if num_ps == 0:
            if sum(counts.values()) > 1:
                raise UserError("more than one worker needs a parameter server")
            return {k: self.compute(k) + self.local_update_s for k in counts}
        base = {k: self.compute(k) + self.latency_s / num_ps for k in counts}
        cycles: Counter[float] = Counter()
        for k, n in counts.items():
            cycles[base[k]] += n
        wait = self._wait(cycles, num_ps) if counts else 0.0
        return {k: t + wait for k, t in base.items()}

    def queue_wait_s(self, base: Sequence[float], num_ps: int) -> float:
        """The wait w at the servers of workers with unloaded cycles `base` (module docstring)."""
        return self._wait(Counter(base), num_ps)

    def _wait(self, cycles: Counter[float], num_ps: int) -> float:
        """`queue_wait_s` of `cycles[t]` workers of unloaded cycle t each."""
        groups = sorted(cycles.items())  # one term per distinct cycle, not per worker
        service = self.ps_service_s / num_ps
        if service == 0:
            return 0.0

        def gap(w: float) -> float:
            # (1 - rho) * (w - Kingman's wait at w): finite where rho >= 1 and negative there
            # (no wait keeps up: the max() keeps it < 0 at w = 0), increasing above the w where
            # rho = 1, so the root is unique
            rate = sum(n / (t + w) for t, n in groups)
            rho = service * rate
            bursts = sum(n * self.cycle_sd_s**2 / (t + w) ** 3 for t, n in groups) / rate
            scv = (self.service_sd_s / service) ** 2 + bursts
            return (1 - rho) * (w if rho < 1 else max(w, service)) - service * rho * scv / 2

        lo, hi = 0.0, service * (cycles.total() + 1)
        while gap(hi) <= 0:
            hi *= 2
        return _root(gap, lo, hi)

    def steps_per_s(self, kinds: Sequence[str], num_ps: int) -> float:
        return self.steps_per_s_by_kind(Counter(kinds), num_ps)

    def steps_per_s_by_kind(self, counts: Mapping[str, int], num_ps: int) -> float:
        times = self.step_times_by_kind(counts, num_ps)
        return sum(counts[k] / t for k, t in times.items())

    def steady_s(self, m: Measurement) -> float:
        """Seconds for measurement `m`'s cluster to run 64,000 steps at its steady rate."""
        return TOTAL_STEPS / self.steps_per_s([m.kind] * m.num_workers, m.num_ps)

    def duration_s(self, m: Measurement) -> float:
        """Predicted measured duration of `m`'s runs: the steady time plus the start offset."""
        return self.steady_s(m) + self.offset_s

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


def _root(f: Callable[[float], float], lo: float, hi: float) -> float:
    """The root of increasing `f` with f(lo) <= 0 < f(hi): regula falsi, Illinois variant."""
    f_lo, f_hi = f(lo), f(hi)
    if f_lo == 0:
        return lo
    side = 0
    for _ in range(200):
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        f_mid = f(mid)
        if f_mid <= 0:
            lo, f_lo = mid, f_mid
            f_hi = f_hi / 2 if side == -1 else f_hi  # the same end twice: halve the other
            side = -1
        else:
            hi, f_hi = mid, f_mid
            f_lo = f_lo / 2 if side == 1 else f_lo
            side = 1
        if hi - lo <= 1e-13 * (1 + hi) or f_mid == 0:
            break
    return mid


def fit(rows: Sequence[Measurement]) -> PSModel:
    """Least squares on log(predicted / measured mean steady time), one residual per row; the
    offset is the mean start offset over the rows' runs (every run counts once)."""
    from scipy.optimize import least_squares  # optional heavy import, only when fitting

    if any(not r.steady_s for r in rows):
        raise ValueError("fitting needs every row's steady times (its evaluation curves)")
    kinds = sorted({m.kind for m in rows})
    lone = any(m.num_ps == 0 for m in rows)

    def model(p) -> PSModel:
        values = [float(v) for v in p]
        return PSModel(dict(zip(kinds, values[: len(kinds)], strict=True)), *values[len(kinds) :])

    def residuals(p) -> list[float]:
        m = model(p)
        return [math.log(m.steady_s(r) / r.steady_mean_s) for r in rows]

    # start from each kind's measured seconds per step per worker
    compute = [
        0.9 * min(r.steady_mean_s * r.num_workers / TOTAL_STEPS for r in rows if r.kind == k)
        for k in kinds
    ]
    lower = [1e-6] * len(kinds) + [0.0] * 5
    upper = [10.0] * len(kinds) + [1.0] * 4 + [1.0 if lone else 1e-12]
    # from several starts (latency 0, 20 and 50 ms) the fits of every split agree
    start = compute + [0.02, 0.02, 0.01, 0.015, 0.02 if lone else 0.0]
    fitted = model(least_squares(residuals, start, bounds=(lower, upper)).x)
    offset = statistics.mean(o for r in rows for o in r.offsets_s)
    # with no lone-worker row the local update is not identified: say so with an exact 0
    return replace(fitted, offset_s=offset, local_update_s=fitted.local_update_s if lone else 0.0)
