"""Measured profiles, kind speeds, the goodput model and cluster specs."""

import pytest

from shoal.cluster.nodes import parse_cluster
from shoal.errors import UserError
from shoal.perf.devices import load_devices
from shoal.perf.goodput import efficiency, gain, goodput_model
from shoal.perf.profiles import load_profile


def test_step_time_reproduces_measured_points():
    p = load_profile("cifar10")
    # placements.csv: "4,129,0.11051218509674073" (1 node, 4 GPUs, local batch 129)
    assert p.step_time_s(1, 4, 129) == pytest.approx(0.11051218509674073)
    # between measured batches the time lies between the neighbours
    t = p.step_time_s(1, 4, 150)
    assert p.step_time_s(1, 4, 129) < t < p.step_time_s(1, 4, 182)
    # the profile's bounds are its measured ones
    assert (p.init_batch_size, p.max_batch_size) == (p.grad_batches[0], p.grad_batches[-1])
    assert (p.init_batch_size, p.max_batch_size, p.max_local_bsz) == (128, 4096, 1024)


def test_step_time_between_and_beyond_the_measured_placements():
    p = load_profile("cifar10")
    # unmeasured GPU counts lie on the line between the measured neighbours at the same N
    # (2 nodes: 2, 3, ... GPUs measured; 6 nodes: 8 and 10 but not 9), T4-equivalents too
    for n, k0, k1 in [(2, 2, 3), (6, 8, 10)]:
        for accum in (1, 3):  # its sync part too
            ends = p.step_time_s(n, k0, 129, accum), p.step_time_s(n, k1, 129, accum)
            assert ends[0] != ends[1]
            assert p.step_time_s(n, (k0 + k1) / 2, 129, accum) == pytest.approx(sum(ends) / 2)
    # 5 nodes were not measured: the smallest measured count above, 6
    assert p.step_time_s(5, 8, 129) == p.step_time_s(6, 8, 129)
    # past the largest measured local batch (1024) compute grows in proportion, sync does not:
    # affine in the batch, and continuous at 1024
    t1, t2, t3 = (p.step_time_s(1, 4, k * 1024) for k in (1, 2, 3))
    assert t2 - t1 == pytest.approx(t3 - t2) and 0 < t2 - t1 < t1
    assert p.step_time_s(1, 4, 1024 * 1.001) == pytest.approx(t1, rel=1e-3)
    # accumulation: each extra micro-step adds the compute part, one sync in all
    a1, a2, a3 = (p.step_time_s(1, 4, 129, accum=a) for a in (1, 2, 3))
    assert a1 == p.step_time_s(1, 4, 129) and a2 - a1 == pytest.approx(a3 - a2)
    assert 0 < a2 - a1 < a1


def test_gradient_statistics_are_read_off_the_curves_linearly():
    """Between measured points: linear in progress; before the first and after the last:
    the end points. Between measured batches: linear in log M; outside them: the nearest."""
    p = load_profile("cifar10")
    x0, x1 = p.grad_progress[3], p.grad_progress[4]
    a, b = p.grad_stats(x0), p.grad_stats(x1)
    assert a != b
    assert p.grad_stats((x0 + x1) / 2) == pytest.approx(((a[0] + b[0]) / 2, (a[1] + b[1]) / 2))
    assert p.grad_stats(x0 + (x1 - x0) / 4)[0] == pytest.approx(a[0] + (b[0] - a[0]) / 4)
    first, last = p.grad_progress[0], p.grad_progress[-1]
    assert p.grad_stats(0.0) == p.grad_stats(first)
    assert p.grad_stats(2 * last) == pytest.approx(p.grad_stats(last - 1e-6), rel=1e-6)
    at = x0 + 100.0
    m128, m256 = p.grad_stats(at, 128), p.grad_stats(at, 256)
    assert m128 != m256 and m128 == p.grad_stats(at)
    between = p.grad_stats(at, (128 * 256) ** 0.5)  # halfway in log M
    assert between == pytest.approx(((m128[0] + m256[0]) / 2, (m128[1] + m256[1]) / 2))
    assert p.grad_stats(at, 64) == m128
    assert p.grad_stats(at, 8192) == p.grad_stats(at, 4096) != p.grad_stats(at, 2048)


def test_efficiency_is_at_most_one_and_falls_with_batch():
    sqr, var = load_profile("cifar10").grad_stats(1000.0)
    effs = [efficiency(b, 128, sqr, var) for b in (128, 256, 1024, 4096)]
    assert effs[0] == pytest.approx(1.0)
    assert all(0 < e <= 1 for e in effs) and effs == sorted(effs, reverse=True)
    assert effs[-1] < effs[0]
    # r(S) at S = 2 with |g|^2 = sigma^2: (1 + 1) / (1/2 + 1); pure noise: every sample counts
    assert gain(256, 128, 1.0, 1.0) == pytest.approx(4 / 3)
    assert efficiency(4096, 128, 0.0, 1.0) == 1.0


def test_kind_speeds_follow_measurements():
    kinds = load_devices()
    s = {k: kinds.app_speed(k, "cifar10") for k in ("k80", "p100", "t4", "v100")}
    assert s["t4"] == 1.0 and s["v100"] > s["p100"] > s["k80"]
    assert kinds.price("t4", "spot") < kinds.price("t4", "on_demand")
    with pytest.raises(UserError, match="unknown device kind"):
        kinds.check("h100")


def test_best_batch_never_worse_than_initial_batch():
    model = goodput_model("cifar10")
    counts = (("t4", 8),)
    batch, rate = model.best_batch(counts, 2, 20000.0)
    assert rate > model.progress_rate(counts, 2, 128, 20000.0) and 128 < batch <= 4096
    # never past the memory bound without accumulation: bert holds 12 samples per T4, and on
    # two T4s 24 is chosen though accumulating up to 384 would give more goodput
    bert, two = goodput_model("bert"), (("t4", 2),)
    progress = 0.6 * bert.profile.total_progress
    assert bert.best_batch(two, 1, progress)[0] == 24 == 2 * bert.profile.max_local_bsz
    assert bert.progress_rate(two, 1, 384, progress) > bert.progress_rate(two, 1, 24, progress)
    # more GPUs of a faster kind never slows a job down at the same batch
    assert model.progress_rate((("v100", 4),), 1, 512, 0) > model.progress_rate(
        (("t4", 4),), 1, 512, 0
    )


def test_a_batch_past_memory_accumulates_and_an_empty_segment_has_its_start_rate():
    model, p = goodput_model("cifar10"), load_profile("cifar10")
    four = (("t4", 4),)
    # a local batch within the memory bound is one pass: the profile's measured point
    assert model.step_time_s(four, 1, 4 * 129) == p.step_time_s(1, 4, 129)
    # twice the bound: two micro-steps of the bound each, one sync
    assert model.step_time_s(four, 1, 4 * 2048) == p.step_time_s(1, 4, 1024, accum=2)
    # an empty range's rate is the rate at its start
    rate = model.progress_rate(four, 1, 512, 5000.0)
    assert model.segment_rate(four, 1, 512, 5000.0, 5000.0) == rate


def test_cluster_specs():
    spec = parse_cluster("easyscale")
    assert spec.num_gpus == 64
    spotty = parse_cluster("4x4xt4").with_spot_fraction(0.5)
    assert [(g.count, g.tier) for g in spotty.groups] == [(2, "on_demand"), (2, "spot")]
    assert parse_cluster("2x4xv100:spot").groups[0].tier == "spot"
    for bad in ("4x4", "0x4xt4", "4x4xh100"):
        with pytest.raises(UserError):
            parse_cluster(bad)
