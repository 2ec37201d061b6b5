"""Local-update (DiLoCo) mode in one process: the outer step's arithmetic, its identities, and
its state as training state."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import shoal
from shoal.config import SlowLinkConfig
from shoal.errors import UserError
from shoal.runtime.local_update import (
    LocalUpdate,
    dequantize,
    grid_exponents,
    quantize,
    site_layout,
)
from shoal.runtime.state import load_training_state, training_state
from shoal.runtime.trainer import Trainer


def job() -> shoal.Job:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 5, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return shoal.Job(
        model=lambda: torch.nn.Sequential(
            torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
        ),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.3, momentum=0.5),
        dataset=torch.utils.data.TensorDataset(x, y),
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=4,
        global_batch_size=16,
        seed=3,
    )


def trainer(local_steps=None, lr=0.7, momentum=0.9) -> Trainer:
    t = Trainer(job())
    if local_steps is not None:
        config = SlowLinkConfig(local_steps=local_steps, outer_lr=lr, outer_momentum=momentum)
        t.local = LocalUpdate(t, config)
    return t


def run(t: Trainer, steps: int) -> list[torch.Tensor]:
    for _ in range(steps):
        t.train_step()
    if t.local:
        t.local.finish(t)
    return [p.detach().clone() for p in t.model.parameters()]


def test_the_exact_mean_of_the_sites_is_the_float_mean_rounded_once():
    g = torch.Generator().manual_seed(1)
    sites = [torch.randn(300, generator=g) * 10.0**s for s in (-3, 0, 2)]
    numels = [100, 200]
    maxima = [max(float(d[:100].abs().max()) for d in sites)]
    maxima.append(max(float(d[100:].abs().max()) for d in sites))
    exps = grid_exponents(maxima, len(sites))
    ints = [quantize(d, numels, exps) for d in sites]
    mean = dequantize(ints[0] + ints[1] + ints[2], numels, exps, 3)
    again = dequantize(ints[2] + ints[0] + ints[1], numels, exps, 3)
    assert torch.equal(mean, again)
    truth = (sites[0].double() + sites[1].double() + sites[2].double()) / 3
    # each site's value is rounded once, to 2**-28 of its tensor's largest entry (3 sites)
    grid = torch.tensor([maxima[0]] * 100 + [maxima[1]] * 200, dtype=torch.float64) * 2.0**-28
    assert bool(((mean.double() - truth).abs() <= grid + truth.abs() * 2.0**-24).all())
    assert int((ints[0] + ints[1] + ints[2]).abs().max()) <= 2**30  # inside an int32


def test_outer_lr_one_without_momentum_is_plain_training():
    # one site: each round ends on reference - 1.0 * (reference - site) = the site's model
    plain, local = run(trainer(), 5), run(trainer(2, lr=1.0, momentum=0.0), 5)
    for a, b in zip(plain, local, strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)


def test_the_outer_step_is_nesterov_sgd_from_the_reference():
    t = trainer(2, lr=0.7, momentum=0.9)
    start = [p.detach().clone() for p in t.model.parameters()]
    t.train_step(), t.train_step()
    site = [p.detach().clone() for p in t.model.parameters()]
    assert t.local.before_step(t) and t.local.synced_at == 2
    for s0, w, p, r in zip(start, site, t.model.parameters(), t.local.reference, strict=True):
        g = s0 - w  # the first outer step: momentum = g, so the step is lr * (1 + mu) * g
        assert torch.allclose(p, s0 - 0.7 * 1.9 * g, rtol=1e-6, atol=1e-7)
        assert torch.equal(p, r)  # the site restarts from the new reference
    assert not t.local.before_step(t)  # a round is H steps: nothing until step 4


def test_the_outer_state_is_training_state():
    first = trainer(2)
    for _ in range(5):  # mid-round, with momentum: the reference differs from the model
        first.train_step()
    saved = copy.deepcopy(training_state(first))  # as a checkpoint or a transfer: no aliases
    second = trainer(2)
    load_training_state(second, saved)
    assert second.local.synced_at == 4 and second.local.outer_steps == 2
    a, b = run(first, 4), run(second, 4)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    lost = trainer(2)  # without the outer state the same steps end elsewhere
    saved_without = dict(saved, local_update=None)
    load_training_state(lost, saved_without)
    assert not all(torch.equal(x, y) for x, y in zip(a, run(lost, 4), strict=True))


@pytest.mark.parametrize("h", [0, -2, 1.5])
def test_fewer_than_one_local_step_is_refused(h):
    with pytest.raises(UserError, match="--local-steps"):
        SlowLinkConfig(local_steps=h)
    with pytest.raises(UserError, match="--outer-momentum"):
        SlowLinkConfig(local_steps=2, outer_momentum=1.0)


@pytest.mark.parametrize("lr", [0.0, -1.0, math.nan, math.inf])
def test_outer_lr_must_be_positive_and_finite(lr):
    """inf was taken: the first outer step made the state inf and the run stopped on a
    non-finite loss that did not name the flag."""
    with pytest.raises(UserError, match="--outer-lr must be > 0 and finite"):
        SlowLinkConfig(local_steps=2, outer_lr=lr)


def test_sites_are_the_spec_else_torchrun_nodes_else_one(monkeypatch):
    monkeypatch.delenv("GROUP_RANK", raising=False)
    assert site_layout(None, 3) == ((0, 1, 2),)  # shoal run: one site
    assert site_layout("0/1,2", 3) == ((0,), (1, 2))
    monkeypatch.setenv("GROUP_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert site_layout(None, 4) == ((0, 1), (2, 3))  # torchrun numbers ranks node by node
    with pytest.raises(UserError, match="names no worker"):
        site_layout("0//1", 2)
