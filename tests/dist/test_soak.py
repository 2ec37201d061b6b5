"""The soak, short: kills and joins, a total loss (launcher and workers SIGKILLed) and --resume
end with the uninterrupted run's digest, losing at most one step per abrupt kill. The full soak
(2,000 steps, over 100 events) is `python bench/soak.py`; its figures are in docs/notes/soak.md."""

import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.dist
BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def test_short_soak(tmp_path):
    spec = importlib.util.spec_from_file_location("soak", BENCH)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    report = soak.soak(
        steps=150,
        n_events=8,
        seed=0,
        every=20,
        loss_at=60,
        out=tmp_path / "run",
        host_s=0.01,
        departures=("kill", "revoke", "notice"),  # a stall costs its seconds: test_failures.py
    )
    assert report["digest_matches"], report
    assert report["steps"] == 150
    assert report["abrupt_failures"] >= 1 and report["at_most_one_lost_step_per_failure"]
    loss = report["total_loss"]
    assert loss["resumed_from"] is not None and 0 < loss["resumed_from"] <= loss["at_step"] < 150
    assert loss["orphans_killed_after_wait"] == 0
