"""An emulated slower kind runs at its catalog speed relative to the fastest kind in the run."""

import statistics

import pytest

from shoal.perf.devices import load_devices
from shoal_testing import metrics, shoal_run

pytestmark = pytest.mark.dist
WORKLOAD = "Transformer (batch size 32)"  # V100 / K80 = 3.03 in Gavel's measurements
OPTIONS = ["-o", f"workload={WORKLOAD!r}", "-o", "micro_batch_size=32", "-o", "global_batch_size=128"]


def ratio() -> float:
    cat = load_devices()
    return cat.workload_speed("v100", WORKLOAD) / cat.workload_speed("k80", WORKLOAD)


def per_micro_batch_s(out, skip=3):
    rows = [r for r in metrics(out) if r["kind"] == "step"][skip:]
    return [
        statistics.median(r["workers"][w]["micro_batch_time_s"] for r in rows if r["workers"][w]["micro_batches"])
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
    shoal_run(out, "v100,k80", 20, *OPTIONS)
    fast, slow = per_micro_batch_s(out, skip=5)
    # The catalog ratio itself is the fixed yardstick's test above. Here the yardstick is the
    # run's own median host time over earlier steps, while `fast` is the fast worker's median
    # over these steps: on a loaded 2-core host the two drift apart (CI measured 0.75x the
    # ratio). The band still fails the fault this test is for, a measured yardstick that never
    # reaches the pacer (the kind then runs unpaced, about 1x), or a runaway pad.
    assert 0.5 * ratio() < slow / fast < 1.5 * ratio()
