"""Non-finite steps: stopped with the step and micro-batch, or skipped and counted, with the
state left exactly as it was; an exact sum never loops on a gradient no grid can hold."""

import pathlib

import pytest
import torch

from shoal.job import build_job, load_job_file
from shoal.runtime.finite import NonFiniteStep, first_nonfinite_loss
from shoal.runtime.state import state_sha256
from shoal.runtime.trainer import Trainer

JOB = pathlib.Path(__file__).resolve().parents[2] / "dist" / "nonfinite_job.py"


def trainer(consistency="exact", on_nonfinite="stop", **options) -> Trainer:
    job = build_job(load_job_file(str(JOB)), options, None)
    return Trainer(job, consistency=consistency, on_nonfinite=on_nonfinite)


def test_first_nonfinite_loss():
    assert first_nonfinite_loss([1.0, 2.0]) is None
    assert first_nonfinite_loss([1.0, float("inf"), float("nan")]) == 1


@pytest.mark.parametrize("consistency", ["exact", "fast"])
@pytest.mark.parametrize("where", ["loss", "grad"])
def test_stop_names_step_and_micro_batch_and_keeps_the_state(consistency, where):
    t = trainer(consistency, poison=2 * 16 + 3 * 4 + 1, where=where)  # step 2, micro-batch 3
    t.train_step()
    t.train_step()
    before = state_sha256(t.model, t.optimizer)
    what = "loss" if where == "loss" else "gradient"
    with pytest.raises(NonFiniteStep, match=f"non-finite {what} at step 2, micro-batch 3"):
        t.train_step()
    assert t.step == 2 and state_sha256(t.model, t.optimizer) == before
    assert all(torch.isfinite(p).all() for p in t.model.parameters())


@pytest.mark.parametrize("where", ["loss", "grad"])
def test_skip_drops_the_update_and_counts(where):
    t = trainer(on_nonfinite="skip", poison=1 * 16, where=where)
    t.train_step()
    before = state_sha256(t.model, t.optimizer)
    t.train_step()  # step 1 holds the poisoned sample: skipped
    assert state_sha256(t.model, t.optimizer) == before and t.nonfinite_skipped == 1
    for _ in range(2):
        t.train_step()  # training goes on, finite
    assert t.step == 4 and t.nonfinite_skipped == 1
    assert state_sha256(t.model, t.optimizer) != before
    assert all(torch.isfinite(p).all() for p in t.model.parameters())


def test_exact_sum_that_never_settles_stops_instead_of_looping(monkeypatch):
    t = trainer()
    # a reducer whose every pass overflows: before the guard, train_step never returned
    monkeypatch.setattr(t.reducer.fixed, "settle", lambda *a: False)
    with pytest.raises(NonFiniteStep, match="non-finite gradient at step 0"):
        t.train_step()
