"""The performance and goodput model of one data-parallel job: the one model every driver shares.

Speed. A job runs one synchronous step at a time on a placement: a count of GPUs per kind over
`num_nodes` nodes. Its global batch M is split across GPUs in proportion to their speed, so a
placement is worth `K_eff = sum(count_k * speed_k)` T4-equivalent GPUs and each takes a local
batch of `M / K_eff` T4-samples per step; the step time is the measured profile's at the placement's
node and GPU counts and that local batch (`shoal.perf.profiles`). A job whose work is divided
into a fixed number P of indivisible units (EasyScale's threads) can only give each GPU a whole
number of units; then `K_eff = P / max_i(units_i / speed_i)` under the best integer split, which
is the step-time model's split (`shoal.perf.step_time`, i.e. `plan_micro_batches`).
A local batch larger than the GPU's measured memory bound is run as gradient accumulation.

Statistical efficiency (Pollux, OSDI'21). With gradient square norm |g|^2 and variance sigma^2
(normalised to the initial batch M0) measured while training at batch M = S * M0, a step makes
`r(S) = (sigma^2 + |g|^2) / (sigma^2 / S + |g|^2)` M0-iterations of progress, so progress per
second is `r(S) / step_time`, and `r(S) / S` is the efficiency. Goodput is that progress rate.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from shoal.perf import step_time
from shoal.perf.devices import DeviceTable, load_devices
from shoal.perf.profiles import AppProfile, load_profile

Counts = tuple[tuple[str, int], ...]  # sorted (kind, gpus) pairs with gpus > 0


def gain(batch_size: float, init_batch_size: float, grad_sqr: float, grad_var: float) -> float:
    """r(S): M0-iterations of progress made by one step at `batch_size`."""
    scale = batch_size / init_batch_size
    if grad_sqr <= 0:  # pure noise: progress scales linearly with the batch
        return scale
    return (grad_var + grad_sqr) / (grad_var / scale + grad_sqr)


def efficiency(
    batch_size: float, init_batch_size: float, grad_sqr: float, grad_var: float
) -> float:
    """r(S)/S in (0, 1]: the fraction of a larger batch's samples that count."""
    return gain(batch_size, init_batch_size, grad_sqr, grad_var) * init_batch_size / batch_size


@dataclass
class GoodputModel:
    """Step time, progress rate and the goodput-optimal batch of one application."""

    app: str
    profile: AppProfile = field(init=False)
    kinds: DeviceTable = field(init=False)
    _cache: dict = field(init=False, default_factory=dict, repr=False)
    _cuts: list[float] = field(init=False, repr=False)  # 0 and the curve's measured points

    def __post_init__(self) -> None:
        self.profile = load_profile(self.app)
        self.kinds = load_devices()
        self._cuts = [0.0, *self.profile.grad_progress]

    def effective_gpus(self, counts: Counts, parallelism: int | None = None) -> float:
        """K_eff in T4-equivalents; `parallelism` = a fixed number of indivisible units."""
        key = ("keff", counts, parallelism)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if parallelism is None:
            k_eff = sum(n * self.kinds.app_speed(k, self.app) for k, n in counts)
        else:
            # only the fastest `parallelism` GPUs can hold a unit; the rest would idle
            speeds = sorted(
                (self.kinds.app_speed(k, self.app) for k, n in counts for _ in range(n)),
                reverse=True,
            )
            k_eff = step_time.units_speed(parallelism, speeds[:parallelism])
        self._cache[key] = k_eff
        return k_eff

    def step_time_s(
        self, counts: Counts, num_nodes: int, batch_size: float, parallelism: int | None = None
    ) -> float:
        batch_size = round(batch_size)  # cached per whole sample: compute at exactly that
        key = (counts, num_nodes, batch_size, parallelism)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        num_gpus = sum(n for _, n in counts)
        k_eff = self.effective_gpus(counts, parallelism)
        local = batch_size / k_eff
        accum = max(1, math.ceil(local / self.profile.max_local_bsz))
        step = self.profile.step_time_s(num_nodes, num_gpus, local / accum, accum)
        self._cache[key] = step
        return step

    def progress_rate(
        self,
        counts: Counts,
        num_nodes: int,
        batch_size: float,
        progress: float,
        parallelism: int | None = None,
    ) -> float:
        """M0-iterations per second (goodput) on this placement at this batch size."""
        if not counts:
            return 0.0
        return self._gain_at(batch_size, progress) / self.step_time_s(
            counts, num_nodes, batch_size, parallelism
        )

    def segment_rate(
        self,
        counts: Counts,
        num_nodes: int,
        batch_size: float,
        start: float,
        end: float,
        parallelism: int | None = None,
    ) -> float:
        """The constant rate that covers progress `start`..`end` in the true time.

        The rate changes along the way (statistical efficiency improves as training goes on), so
        the time is the integral of d(progress)/rate: the midpoint rule on the pieces between
        the measured points (epochs) of the gradient-statistics curve, along which the
        statistics are linear. The answer is the harmonic mean of the pieces' rates.
        """
        if not counts:
            return 0.0
        if end <= start:
            return self.progress_rate(counts, num_nodes, batch_size, start, parallelism)
        points = self.profile.grad_progress
        lo, hi = bisect.bisect_right(points, start), bisect.bisect_left(points, end)
        cuts = [start, *points[lo:hi], end]
        seconds = 0.0
        for a, b in zip(cuts, cuts[1:], strict=False):
            if b > a:
                rate = self.progress_rate(counts, num_nodes, batch_size, (a + b) / 2, parallelism)
                seconds += (b - a) / rate
        return (end - start) / seconds

    def progress_after(self, batch_size: float, steps: float) -> float:
        """The progress that `steps` steps at a fixed `batch_size` reach from the start.

        The inverse of `segment_rate`'s integral: per piece between the curve's measured points,
        a step makes the gain of the piece's midpoint. A trace that names a job by steps (or by
        seconds on an allocation) thus gets exactly that many steps: early in training a step
        gains far less than on average (yolov3 at 8 x its initial batch: 1.0 at the start, 7.2
        over the curve), so a short job priced at the curve's mean gain ran several times its
        steps.
        """
        cum = self._cumulative_steps(batch_size)
        cuts = self._cuts
        i = bisect.bisect_right(cum, steps)
        if i < len(cum):  # within the piece [cuts[i - 1], cuts[i]]
            a, b, left = cuts[i - 1], cuts[i], steps - cum[i - 1]
        else:  # past the curve's last point: a piece as long as it takes
            a, left = cuts[-1], steps - cum[-1]
            b = a + left * self._gain_at(batch_size, a) + 1.0
            while (b - a) / self._gain_at(batch_size, (a + b) / 2) < left:
                b += b - a

        def excess(x: float) -> float:  # > 0 past the answer (more steps than `left`)
            return (x - a) / self._gain_at(batch_size, (a + x) / 2) - left

        lo, hi, f_lo, f_hi = a, b, -left, excess(b)
        for _ in range(100):  # false position (Illinois): a few evaluations on these curves
            x = hi - f_hi * (hi - lo) / (f_hi - f_lo)
            f_x = excess(x)
            if abs(f_x) <= 1e-12 * max(1.0, steps) or hi - lo <= 1e-12 * b:
                return x
            if (f_x > 0) == (f_hi > 0):
                hi, f_hi, f_lo = x, f_x, f_lo / 2
            else:
                lo, f_lo, f_hi = x, f_x, f_hi / 2
        return x

    def steps_between(self, batch_size: float, start: float, end: float) -> float:
        """Steps at a fixed `batch_size` from progress `start` to `end`, as `segment_rate`
        integrates them (per piece between the curve's measured points, at the gain of the
        piece's midpoint): `progress_after`'s inverse from 0, and a job's exact remaining steps
        from its progress to its own end (which is not the curve's end for a job of a trace)."""
        if end <= start:
            return 0.0
        cuts = self._cuts
        i, j = bisect.bisect_right(cuts, start), bisect.bisect_right(cuts, end)
        if i == j:  # one piece, or both past the curve (where its last statistics hold)
            return (end - start) / self._gain_at(batch_size, (start + end) / 2)
        cum = self._cumulative_steps(batch_size)
        first = (cuts[i] - start) / self._gain_at(batch_size, (start + cuts[i]) / 2)
        last = (end - cuts[j - 1]) / self._gain_at(batch_size, (cuts[j - 1] + end) / 2)
        return first + cum[j - 1] - cum[i] + last

    def _cumulative_steps(self, batch_size: float) -> list[float]:
        """Steps at `batch_size` from the start to each measured point (0 at progress 0)."""
        key = ("steps", batch_size)
        hit = self._cache.get(key)
        if hit is None:
            cuts = self._cuts
            hit = [0.0]
            for a, b in zip(cuts, cuts[1:], strict=False):
                hit.append(hit[-1] + (b - a) / self._gain_at(batch_size, (a + b) / 2))
            self._cache[key] = hit
        return hit

    def _gain_at(self, batch_size: float, progress: float) -> float:
        sqr, var = self.profile.grad_stats(progress, batch_size)
        return gain(batch_size, self.profile.init_batch_size, sqr, var)

    def best_batch(
        self, counts: Counts, num_nodes: int, progress: float, candidates: int = 12
    ) -> tuple[float, float]:
        """(batch size, goodput) maximising goodput over a geometric grid of batch sizes.

        The choice is memoised per measured point of the gradient-statistics curve (one per
        epoch of the validation run): between two points the optimum barely moves.
        """
        epoch = bisect.bisect_left(self.profile.grad_progress, progress)
        key = ("best", counts, num_nodes, epoch, candidates)
        hit = self._cache.get(key)
        if hit is None:
            # search at the curve point that opens this bucket, so the choice does not depend
            # on which caller asked first (results must not depend on run order)
            points = self.profile.grad_progress
            anchor = points[epoch - 1] if epoch > 0 else 0.0
            hit = self._search_batch(counts, num_nodes, anchor, candidates)
            self._cache[key] = hit
        return hit, self.progress_rate(counts, num_nodes, hit, progress)

    def _search_batch(
        self, counts: Counts, num_nodes: int, progress: float, candidates: int
    ) -> float:
        m0, m_max = self.profile.init_batch_size, self.profile.max_batch_size
        k_eff = self.effective_gpus(counts)
        # no larger than the memory bound allows without accumulation
        hi = max(m0, min(m_max, self.profile.max_local_bsz * k_eff))
        best = (float(m0), self.progress_rate(counts, num_nodes, m0, progress))
        for i in range(1, candidates + 1 if hi > m0 else 1):
            batch = float(round(m0 * (hi / m0) ** (i / candidates)))
            rate = self.progress_rate(counts, num_nodes, batch, progress)
            if rate > best[1]:
                best = (batch, rate)
        return best[0]


_MODELS: dict[str, GoodputModel] = {}


def goodput_model(app: str) -> GoodputModel:
    """The shared (memoised) model of `app`."""
    model = _MODELS.get(app)
    if model is None:
        model = _MODELS[app] = GoodputModel(app)
    return model
