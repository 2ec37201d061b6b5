"""An emulated slower kind runs at its catalog speed relative to the fastest kind in the run."""

import statistics

import pytest

from shoal.perf.devices import load_devices
from shoal_testing import metrics, shoal_run

pytestmark = pytest.mark.dist
WORKLOAD = "Transformer (batch size 32)"  # V100 / K80 = 3.03 in Gavel's measurements
OPTIONS = ["-o", f"workload={WORKLOAD!r}", "-o", "micro_batch_size=32"]
OPTIONS += ["-o", "global_batch_size=128"]
# V100 / K80 = 11.6: M = 16, so that the k80's share is one micro-batch (the v100 takes 15)
FAR_APART = "ResNet-18 (batch size 256)"
FAR_OPTIONS = ["-o", f"workload={FAR_APART!r}", "-o", "micro_batch_size=16"]
FAR_OPTIONS += ["-o", "global_batch_size=256"]


def ratio(workload: str = WORKLOAD) -> float:
    cat = load_devices()
    return cat.workload_speed("v100", workload) / cat.workload_speed("k80", workload)


def per_micro_batch_s(out, skip=3):
    rows = [r for r in metrics(out) if r["kind"] == "step"][skip:]
    return [
        statistics.median(
            r["workers"][w]["micro_batch_time_s"] for r in rows if r["workers"][w]["micro_batches"]
        )
        for w in range(2)
    ]


def test_a_fixed_yardstick_sets_the_emulated_speed(tmp_path):
    out = tmp_path / "fixed"
    host_s = 0.02  # far above this host's real time per micro-batch, so the pad decides
    shoal_run(out, "v100,k80", 8, *OPTIONS, env={"SHOAL_EMULATED_HOST_S": str(host_s)})
    fast, slow = per_micro_batch_s(out)
    assert 0.999 * ratio() * host_s <= slow < 1.1 * ratio() * host_s
    # a fixed yardstick paces the fastest kind too: its speed does not follow the host's load
    assert 0.999 * host_s <= fast < 1.1 * host_s


def test_an_emulated_kind_paces_against_the_fastest_worker(tmp_path):
    out = tmp_path / "measured"
    shoal_run(out, "v100,k80", 20, *FAR_OPTIONS)
    fast, slow = per_micro_batch_s(out, skip=5)
    # The catalog ratio itself is the fixed yardstick's test above. Here the yardstick is the
    # run's own median host time (the faster worker's, per step) over earlier steps, while
    # `fast` is the fast worker's median over these steps: the two drift apart by chance, per
    # run (0.73x to 1.10x the ratio on an idle 2-core host with a 3x kind, 0.75x on CI). The
    # fault this test is for is a measured yardstick that never reaches the pacer: the kind
    # then runs unpaced, at about 1x, which is 0.09x the ratio of a kind 11.6x slower; a band
    # of 0.25x to 2x leaves the drift room 3x over and still fails that, or a runaway pad.
    assert 0.25 * ratio(FAR_APART) < slow / fast < 2 * ratio(FAR_APART)
