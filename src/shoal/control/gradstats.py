"""Gradient statistics over logical micro-batches: the noise scale and the half-batch similarity.

The runtime measures, per step, the squared norm |g_j|^2 of each micro-batch's mean-loss gradient
and the squared norm |g|^2 of the step's exactly summed mean gradient g = (1/M) sum_j g_j
(`StepStats`). Both depend only on the logical micro-batches, never on which worker computed
them, so every worker holds bit-identical values on every layout.

Noise scale (Pollux/AdaptDL's estimator, McCandlish et al.'s B_simple). A micro-batch of b
samples has E|g_j|^2 = |G|^2 + tr(Sigma)/b and the step's mean E|g|^2 = |G|^2 + tr(Sigma)/(M b),
with G the true gradient and Sigma the per-sample covariance. Solving the two for the unknowns:

    |G|^2     ~ (M |g|^2 - mean_j |g_j|^2) / (M - 1)
    tr(Sigma) ~ b M (mean_j |g_j|^2 - |g|^2) / (M - 1)

Both are unbiased but noisy, so each is smoothed by an exponential moving average with bias
correction (the average divided by the weight the EMA has accumulated, as Pollux does); the read
values are clipped as Pollux clips them (|G|^2 >= 0, tr(Sigma) >= 1e-6). noise_scale =
tr(Sigma)/|G|^2 in samples: the batch at which gradient noise and signal are equal.

Similarity (SimiGrad/JABAS): the cosine between the exact sums of the two fixed halves of a
step's micro-batches (j < M//2 and j >= M//2), measured on decision steps only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

GRAD_VAR_FLOOR = 1e-6  # Pollux's floor on the smoothed variance (a zero variance is no estimate)


@dataclass(frozen=True)
class StepStats:
    """One step's exact, layout-invariant gradient statistics (what the runtime measures)."""

    step: int
    micro_batch_size: int  # b, samples per micro-batch
    num_micro_batches: int  # M this step (global batch B = M * b)
    sqnorms: tuple[float, ...]  # |g_j|^2 per micro-batch j (gradient of its mean loss)
    mean_sqnorm: float  # |g|^2 of g = (1/M) sum_j g_j, the step's exactly summed gradient
    similarity: float | None  # cosine of the two half-sums on measured steps, else None
    loss: float  # the step's mean loss

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.num_micro_batches


def raw_estimates(stats: StepStats) -> tuple[float, float] | None:
    """(|G|^2, tr(Sigma)) from one step, unsmoothed; None when M < 2 (no spread to measure)."""
    m = stats.num_micro_batches
    if m < 2 or len(stats.sqnorms) != m:
        return None
    mean_sq = math.fsum(stats.sqnorms) / m  # fsum: the same value whatever the summation order
    grad_sqr = (m * stats.mean_sqnorm - mean_sq) / (m - 1)
    grad_var = stats.micro_batch_size * m * (mean_sq - stats.mean_sqnorm) / (m - 1)
    return grad_sqr, grad_var


class NoiseScale:
    """Pollux's estimator of |G|^2 and tr(Sigma) from StepStats, exponentially smoothed with
    bias correction; noise_scale = tr(Sigma)/|G|^2 (per-sample units, McCandlish's B_simple)."""

    def __init__(self, smoothing: float = 0.9) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError("smoothing must be in [0, 1)")
        self.smoothing = smoothing
        self._sqr_avg = 0.0  # EMA numerators
        self._var_avg = 0.0
        self._weight = 0.0  # the EMA's accumulated weight: 1 - smoothing^n after n updates

    def update(self, stats: StepStats) -> None:
        """Fold in one step (ignored when M < 2 or an estimate is not finite)."""
        raw = raw_estimates(stats)
        if raw is None or not all(math.isfinite(x) for x in raw):
            return
        theta = self.smoothing
        self._sqr_avg = theta * self._sqr_avg + (1 - theta) * raw[0]
        self._var_avg = theta * self._var_avg + (1 - theta) * raw[1]
        self._weight = theta * self._weight + (1 - theta)

    @property
    def grad_sqr(self) -> float | None:
        """Smoothed |G|^2 (>= 0), None before the first update."""
        return max(self._sqr_avg / self._weight, 0.0) if self._weight > 0 else None

    @property
    def grad_var(self) -> float | None:
        """Smoothed tr(Sigma) per sample (>= 1e-6), None before the first update."""
        return max(self._var_avg / self._weight, GRAD_VAR_FLOOR) if self._weight > 0 else None

    @property
    def noise_scale(self) -> float | None:
        """tr(Sigma)/|G|^2 in samples; None before the first update or while |G|^2 reads 0
        (pure noise: the scale is unbounded)."""
        sqr, var = self.grad_sqr, self.grad_var
        if sqr is None or var is None or sqr <= 0:
            return None
        return var / sqr

    def state_dict(self) -> dict:
        # Python floats survive JSON exactly (repr round-trips), so a restored run is bit-identical
        return {
            "smoothing": self.smoothing,
            "sqr_avg": self._sqr_avg,
            "var_avg": self._var_avg,
            "weight": self._weight,
        }

    def load_state_dict(self, state: dict) -> None:
        self.smoothing = float(state["smoothing"])
        self._sqr_avg = float(state["sqr_avg"])
        self._var_avg = float(state["var_avg"])
        self._weight = float(state["weight"])


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors (0 when either is zero), summed with fsum (order-free)."""
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return cosine_from_dot(dot, math.fsum(x * x for x in a), math.fsum(y * y for y in b))


def cosine_from_dot(dot: float, sqnorm_a: float, sqnorm_b: float) -> float:
    """cos(a, b) from a.b, |a|^2 and |b|^2 (0 when either vector is zero)."""
    if sqnorm_a <= 0 or sqnorm_b <= 0:
        return 0.0
    return max(-1.0, min(1.0, dot / math.sqrt(sqnorm_a * sqnorm_b)))


def half_similarity(sqnorm_first: float, sqnorm_second: float, sqnorm_total: float) -> float:
    """cos(h1, h2) from |h1|^2, |h2|^2 and |h1 + h2|^2 (the runtime already has the total):
    h1.h2 = (|h1 + h2|^2 - |h1|^2 - |h2|^2) / 2."""
    dot = (sqnorm_total - sqnorm_first - sqnorm_second) / 2
    return cosine_from_dot(dot, sqnorm_first, sqnorm_second)


def synthetic_stats(
    step: int,
    micro_batch_size: int,
    num_micro_batches: int,
    grad_sqr: float,
    grad_var: float,
    loss: float = 0.0,
) -> StepStats:
    """StepStats whose estimates are exactly (grad_sqr, grad_var): what a step measures in
    expectation. The simulator feeds a policy its profiles' statistics through this, so it
    decides through the same call as a live run."""
    b, m = micro_batch_size, num_micro_batches
    per_micro = grad_sqr + grad_var / b
    return StepStats(
        step=step,
        micro_batch_size=b,
        num_micro_batches=m,
        sqnorms=(per_micro,) * m,
        mean_sqnorm=grad_sqr + grad_var / (b * m),
        similarity=None,
        loss=loss,
    )
