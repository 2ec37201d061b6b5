"""The noise-scale estimator and the similarity on synthetic gradients with a known answer.

Gradients: a true gradient G (|G|^2 = 1) and isotropic per-sample noise with tr(Sigma) = 64, so
the noise scale is 64 samples. A micro-batch of b samples has gradient G + noise of covariance
Sigma/b. Each step draws M such micro-batch gradients and hands the estimator exactly what the
runtime measures (|g_j|^2 and |mean_j g_j|^2). The data is seeded, so the test is deterministic;
the tolerance is justified by the estimator's spread measured on the same data: the averaged
estimates' relative standard error is asserted below 1 %, so the 5 % bound is over 5 standard
errors, and the smoothed estimate (an EMA of ~200 steps' weight) is held to 5x its own error.
"""

import json
import math

import numpy as np
import pytest

from shoal.control.gradstats import (
    NoiseScale,
    StepStats,
    cosine,
    half_similarity,
    raw_estimates,
    synthetic_stats,
)

DIM, B, M, STEPS = 64, 4, 8, 4000
GRAD_SQR, TRACE = 1.0, 64.0


def _steps(seed=0):
    rng = np.random.default_rng(seed)
    g_true = np.full(DIM, math.sqrt(GRAD_SQR / DIM))
    per_coord_sd = math.sqrt(TRACE / DIM / B)  # a micro-batch's noise: Sigma / b
    grads = g_true + per_coord_sd * rng.standard_normal((STEPS, M, DIM))
    for step, g in enumerate(grads):
        yield StepStats(
            step=step,
            micro_batch_size=B,
            num_micro_batches=M,
            sqnorms=tuple(float(x) for x in (g * g).sum(axis=1)),
            mean_sqnorm=float((g.mean(axis=0) ** 2).sum()),
            similarity=None,
            loss=0.0,
        )


def test_estimator_recovers_a_known_noise_scale():
    raw = np.array([raw_estimates(s) for s in _steps()])
    sqr, var = raw.mean(axis=0)
    se = raw.std(axis=0) / math.sqrt(STEPS) / np.array([GRAD_SQR, TRACE])
    assert (se < 0.01).all(), se  # the data are precise enough for the bound below
    assert sqr == pytest.approx(GRAD_SQR, rel=0.05)
    assert var == pytest.approx(TRACE, rel=0.05)
    assert var / sqr == pytest.approx(TRACE / GRAD_SQR, rel=0.1)

    noise = NoiseScale(smoothing=0.99)  # ~199 steps' effective weight
    for stats in _steps():
        noise.update(stats)
    # a ~199-step average's relative error: about 0.8 % x sqrt(STEPS / 199) = 3.6 % (|G|^2
    # dominates it); 20 % is over 5 of those
    assert noise.noise_scale == pytest.approx(TRACE / GRAD_SQR, rel=0.2)


def test_first_update_is_unbiased_and_small_steps_are_ignored():
    noise = NoiseScale(0.9)
    assert noise.noise_scale is None
    noise.update(synthetic_stats(0, 8, 1, 1.0, 10.0))  # M = 1: nothing to measure
    assert noise.grad_sqr is None
    noise.update(synthetic_stats(0, 8, 4, 2.0, 10.0))
    assert noise.grad_sqr == pytest.approx(2.0) and noise.grad_var == pytest.approx(10.0)
    assert noise.noise_scale == pytest.approx(5.0)  # bias correction: no pull towards 0


def test_state_round_trip_is_exact():
    a, stream = NoiseScale(0.95), list(_steps(1))[:40]
    for s in stream[:20]:
        a.update(s)
    b = NoiseScale()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for s in stream[20:]:
        a.update(s)
        b.update(s)
    assert a.state_dict() == b.state_dict() and a.noise_scale == b.noise_scale


def test_similarity_equals_a_direct_cosine():
    rng = np.random.default_rng(3)
    g = rng.standard_normal((6, 32)) + 0.3
    first, second = g[:3].sum(axis=0), g[3:].sum(axis=0)
    direct = float(first @ second / np.linalg.norm(first) / np.linalg.norm(second))
    assert cosine(first.tolist(), second.tolist()) == pytest.approx(direct, abs=1e-12)
    from_norms = half_similarity(
        float(first @ first), float(second @ second), float((first + second) @ (first + second))
    )
    assert from_norms == pytest.approx(direct, abs=1e-9)
    assert cosine([0.0, 0.0], [1.0, 2.0]) == 0.0
