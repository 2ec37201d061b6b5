"""Measured profiles, kind speeds, the goodput model and cluster specs."""

import pytest

from shoal.cluster.nodes import parse_cluster
from shoal.errors import UserError
from shoal.perf.devices import load_devices
from shoal.perf.goodput import efficiency, goodput_model
from shoal.perf.profiles import load_profile


def test_step_time_reproduces_measured_points():
    p = load_profile("cifar10")
    # placements.csv: "4,129,0.11051218509674073" (1 node, 4 GPUs, local batch 129)
    assert p.step_time_s(1, 4, 129) == pytest.approx(0.11051218509674073)
    # between measured batches the time lies between the neighbours
    t = p.step_time_s(1, 4, 150)
    assert p.step_time_s(1, 4, 129) < t < p.step_time_s(1, 4, 182)


def test_efficiency_is_at_most_one_and_falls_with_batch():
    sqr, var = load_profile("cifar10").grad_stats(1000.0)
    effs = [efficiency(b, 128, sqr, var) for b in (128, 256, 1024, 4096)]
    assert effs[0] == pytest.approx(1.0)
    assert all(0 < e <= 1 for e in effs) and effs == sorted(effs, reverse=True)


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
    assert rate >= model.progress_rate(counts, 2, 128, 20000.0)
    assert 128 <= batch <= 4096
    # more GPUs of a faster kind never slows a job down at the same batch
    assert model.progress_rate((("v100", 4),), 1, 512, 0) > model.progress_rate(
        (("t4", 4),), 1, 512, 0
    )


def test_cluster_specs():
    spec = parse_cluster("easyscale")
    assert spec.num_gpus == 64
    spotty = parse_cluster("4x4xt4").with_spot_fraction(0.5)
    assert [(g.count, g.tier) for g in spotty.groups] == [(2, "on_demand"), (2, "spot")]
    assert parse_cluster("2x4xv100:spot").groups[0].tier == "spot"
    for bad in ("4x4", "0x4xt4", "4x4xh100"):
        with pytest.raises(UserError):
            parse_cluster(bad)
