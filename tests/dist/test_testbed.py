"""The slow-link test bed: a real 2-process gloo all-reduce through torchrun's c10d rendezvous
across two network namespaces is bounded by the shaped rate, and follows a rate change made
while it runs; every namespace is gone afterwards. Skips when not root or without `ip netns`."""

import subprocess

import pytest
from slowlink.testbed import SlowLinkBed, bed_available, run_allreduce_probe

pytestmark = pytest.mark.dist
REASON = bed_available()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_shaped_rate_bounds_allreduce_throughput_and_can_change():
    rates = [40.0, 160.0]  # Mbit/s; slow enough that a loaded CPU is not the bottleneck
    with SlowLinkBed(2, rates[0]) as bed:
        names = list(bed.sites)
        first, second = run_allreduce_probe(bed, rates, size_mb=1.0, iters=3, timeout_s=60)
    for row in (first, second):
        assert row["mbit_per_s"] <= 1.08 * row["rate_mbit"]  # the shaper bounds it
        assert row["mbit_per_s"] >= 0.5 * row["rate_mbit"]  # ... and the link is really used
    assert second["mbit_per_s"] > 2 * first["mbit_per_s"]  # the mid-run change took effect
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_teardown_runs_when_the_body_fails():
    with pytest.raises(RuntimeError), SlowLinkBed(2, 10.0) as bed:
        names = list(bed.sites) + [bed.hub]
        raise RuntimeError("a failing job")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in listed for name in names)


@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_slowlink_train_smoke(tmp_path):
    """bench/slowlink_train.py --smoke: every side that this shoal has runs on the bed and
    reports a throughput (the timing run itself is the benchmark's, not a test's); a shoal
    side's timed run writes no checkpoint before its last step, and its curve comes from a
    replay that ends on the timed run's state_sha256."""
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sides = "ddp,shoal-dense,shoal-local"
    argv = [sys.executable, "bench/slowlink_train.py", "--smoke", "--sides", sides]
    subprocess.run([*argv, "--out", str(tmp_path)], cwd=root, check=True, timeout=400)
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["side"] for r in rows} == set(sides.split(","))
    assert all(r["steps_per_s"] > 0 and "status" not in r for r in rows), rows
    for r in rows[1:]:  # the shoal sides
        assert r["curve"] == "replay" and r["state_sha256"] == r["replay_sha256"], r
        assert len(r["val_curve"]) >= 2  # mid-run points, from the replay's checkpoints
        timed = tmp_path / f"transformer-{r['rate_mbit']:g}-{r['side']}" / "checkpoints"
        assert [p.name for p in timed.glob("ckpt-*.json")] == [f"ckpt-{r['steps']:09d}.json"]
