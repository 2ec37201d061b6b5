"""Mixed precision: the loss scale keeps torch.amp.GradScaler's rule and its numbers, a trainer
under float16 autocast trains bit for bit as a plain GradScaler loop does, a gradient overflow
is skipped without --on-nonfinite, and the scale is training state."""

import dataclasses
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shoal
from shoal.job import build_job, load_job_file
from shoal.runtime.finite import NonFiniteStep
from shoal.runtime.precision import LossScale
from shoal.runtime.state import load_training_state, state_sha256, training_state
from shoal.runtime.trainer import Trainer

NONFINITE_JOB = pathlib.Path(__file__).resolve().parents[2] / "dist" / "nonfinite_job.py"
SAMPLES, B = 96, 8


def job(**fields) -> shoal.Job:
    """A two-layer classifier on fixed random data, read in order (no shuffle): step t reads
    samples t*B .. t*B+B-1 while t*B < SAMPLES."""
    g = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(
        torch.randn(SAMPLES, 6, generator=g), torch.randint(0, 3, (SAMPLES,), generator=g)
    )
    base = dict(
        model=lambda: nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        dataset=data,
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=B,
        global_batch_size=B,
        shuffle=False,
    )
    return shoal.Job(**{**base, **fields})


def grad_scaler_run(j: shoal.Job, model: nn.Module, steps: int, **settings):
    """The plain loop a PyTorch user writes: autocast, GradScaler, one batch per step."""
    optimizer = j.optimizer(model.parameters())
    scaler = torch.amp.GradScaler("cpu", **settings)
    scales, skipped = [], []
    for t in range(steps):
        x, y = j.dataset[t * B : (t + 1) * B]
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = j.loss_fn(model, (x, y))
        scales.append(scaler.get_scale())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        skipped.append(scaler.get_scale() < scales[-1])  # backed off: the step was skipped
    return scales, skipped, optimizer


@pytest.mark.parametrize(
    "settings",
    [
        {"init_scale": 2.0**20, "growth_interval": 2},
        {"init_scale": 3.0e5, "growth_factor": 3.0, "backoff_factor": 0.3, "growth_interval": 1},
    ],
)
def test_a_float16_run_is_a_grad_scaler_loop_bit_for_bit(settings):
    steps = SAMPLES // B
    j = job(autocast="float16", loss_scale=settings)
    t = Trainer(j, consistency="fast")
    model = j.model()
    model.load_state_dict(t.model.state_dict())  # the trainer's initial weights
    records = [t.train_step() for _ in range(steps)]
    scales, skipped, optimizer = grad_scaler_run(j, model, steps, **settings)
    assert [r.loss_scale for r in records] == scales
    assert [r.skipped for r in records] == skipped
    assert 0 < sum(skipped) < steps  # it overflowed, backed off, and trained
    assert max(scales[1:]) > min(scales)  # ... and grew again
    assert t.loss_scale.backoffs == sum(skipped)
    assert state_sha256(t.model, t.optimizer) == state_sha256(model, optimizer)


def test_the_update_rule_is_grad_scalers_to_the_float32_limit():
    ours = LossScale({"init_scale": 2.0**126, "growth_interval": 1})
    theirs = torch.amp.GradScaler("cpu", init_scale=2.0**126, growth_interval=1)
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    for finite in [True, True, False, True, True, True, False, False]:
        theirs.scale(torch.zeros(()))  # (GradScaler makes its scale at its first use)
        p.grad = torch.zeros(1) if finite else torch.full((1,), float("inf"))
        theirs.unscale_(opt)
        theirs.step(opt)
        theirs.update()
        ours.update(finite)
        assert ours.scale == theirs.get_scale()  # 2**127 is kept: 2**128 is no float32
        assert ours.growth_tracker == theirs._growth_tracker.item()


def test_a_fixed_scale_never_changes_and_none_scales_nothing():
    fixed, off = LossScale(1024), LossScale(None)
    fixed.update(False)
    fixed.update(True)
    assert (fixed.scale, fixed.inverse, fixed.enabled, fixed.dynamic) == (
        1024.0,
        2**-10,
        True,
        False,
    )
    assert (off.scale, off.inverse, off.enabled) == (1.0, 1.0, False)
    off.load_state_dict({"scale": 8.0, "growth_tracker": 1, "backoffs": 3})  # not this job's
    assert off.scale == 1.0


def test_bfloat16_autocast_is_applied():
    losses = [Trainer(job(autocast=a)).train_step().loss for a in (None, "bfloat16")]
    assert losses[0] != pytest.approx(losses[1], rel=1e-6, abs=0)  # bfloat16's 8 bits showed
    assert losses[0] == pytest.approx(losses[1], rel=0.05)


def nonfinite_trainer(where: str) -> Trainer:
    j = build_job(load_job_file(str(NONFINITE_JOB)), {"poison": 1 * 16, "where": where}, None)
    return Trainer(dataclasses.replace(j, loss_scale="dynamic"))  # --on-nonfinite stop


def test_a_dynamic_scale_skips_a_gradient_overflow_and_backs_off_without_on_nonfinite():
    t = nonfinite_trainer("grad")
    t.train_step()
    before = state_sha256(t.model, t.optimizer)
    record = t.train_step()  # step 1's gradient is NaN: skipped, as GradScaler skips it
    assert record.skipped and record.loss_scale == 2.0**16
    assert state_sha256(t.model, t.optimizer) == before
    assert (t.loss_scale.scale, t.loss_scale.backoffs, t.nonfinite_skipped) == (2.0**15, 1, 0)


def test_a_non_finite_loss_is_still_on_nonfinites_to_stop():
    t = nonfinite_trainer("loss")
    t.train_step()
    with pytest.raises(NonFiniteStep, match="non-finite loss at step 1"):
        t.train_step()
    assert t.loss_scale.scale == 2.0**16  # the step did not happen: no back-off either


@pytest.mark.parametrize("consistency", ["exact", "fast"])
def test_the_scale_is_training_state(consistency):
    j = job(autocast="float16", loss_scale={"init_scale": 2.0**20, "growth_interval": 2})
    j = dataclasses.replace(j, micro_batch_size=B // 2, global_batch_size=2 * B)  # M = 4
    whole = Trainer(j, consistency=consistency)
    for _ in range(6):
        whole.train_step()
    first = Trainer(j, consistency=consistency)
    for _ in range(3):
        first.train_step()
    state = training_state(first)
    assert state["loss_scale"]["scale"] == first.loss_scale.scale
    second = Trainer(j, consistency=consistency)
    load_training_state(second, state)
    for _ in range(3):
        second.train_step()
    assert second.loss_scale.state_dict() == whole.loss_scale.state_dict()
    assert whole.loss_scale.backoffs > 0
    assert state_sha256(second.model, second.optimizer) == state_sha256(
        whole.model, whole.optimizer
    )
