"""Local-update mode with the outer exchange overlapped (`--outer-overlap D`), in one process:
the round's arithmetic on two sites (two trainers, their exact mean formed as the all-reduce
would), the in-flight exchange as training state, and the flag's bounds."""

import copy

import pytest
import torch
import torch.nn.functional as F

import shoal
from shoal.config import SlowLinkConfig
from shoal.errors import UserError
from shoal.runtime.local_update import LocalUpdate, dequantize, grid_exponents, quantize
from shoal.runtime.state import load_training_state, training_state
from shoal.runtime.trainer import Trainer


def job(seed: int) -> shoal.Job:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 5, generator=g)
    return shoal.Job(
        model=lambda: torch.nn.Sequential(
            torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
        ),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.3, momentum=0.5),
        dataset=torch.utils.data.TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long()),
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=4,
        global_batch_size=16,
        seed=seed,
    )


def site(seed: int, h: int, d: int | None) -> Trainer:
    """A one-worker site training on the micro-batches of `seed`, from seed 5's weights."""
    t = Trainer(job(seed))
    t.model.load_state_dict(Trainer(job(5)).model.state_dict())
    t.local = LocalUpdate(t, SlowLinkConfig(local_steps=h, outer_overlap=d))
    return t


def weights(t: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in t.model.parameters()]


def two_site_mean(sites: list[Trainer]) -> list[torch.Tensor]:
    """What the exchange's int32 all-reduce gives: the exact mean of the sites' deltas."""
    deltas = [torch.cat([d.reshape(-1) for d in t.local.pseudo_gradient(t.local.pending)])
              for t in sites]  # fmt: skip
    numels = sites[0].local.numels
    maxima = [
        max(float(d.abs().max()) for d in parts)
        for parts in zip(*[torch.split(d, numels) for d in deltas], strict=True)
    ]
    exps = grid_exponents(maxima, 2)
    summed = sum(quantize(d, numels, exps) for d in deltas)
    flat = dequantize(summed, numels, exps, 2)
    return [m.view_as(p) for m, p in zip(torch.split(flat, numels), weights(sites[0]), strict=True)]


def test_two_sites_keep_their_inner_steps_on_top_of_the_outer_step():
    h, d = 3, 2
    sites = [site(seed, h, d) for seed in (5, 6)]
    start = weights(sites[0])
    for t in sites:
        for _ in range(h):
            t.train_step()
    at_launch = [weights(t) for t in sites]
    for t in sites:
        assert t.local.before_step(t) and t.local.pending is not None  # launched, not applied
        assert all(torch.equal(a, b) for a, b in zip(weights(t), at_launch[sites.index(t)]))
    for t in sites:  # D inner steps under the exchange, each site from its own weights
        for _ in range(d):
            t.train_step()
    now = [weights(t) for t in sites]
    mean = two_site_mean(sites)
    for t in sites:
        t.local.end_round(mean)
    for s0, m, r0, r1 in zip(start, mean, *[t.local.reference for t in sites], strict=True):
        # the first outer step: lr * (1 + mu) * mean, the same reference on both sites
        assert torch.allclose(r0, s0 - 0.7 * 1.9 * m, rtol=1e-6, atol=1e-7)
        assert torch.equal(r0, r1)
    for i, t in enumerate(sites):
        for p, r, w, w0 in zip(t.model.parameters(), t.local.reference, now[i], at_launch[i]):
            assert torch.equal(p.detach(), (w - w0) + r)  # new reference + the drift since
        assert t.local.pending is None and t.local.outer_steps == 1
    # the next round counts from the launch: its pseudo-gradient covers H inner steps
    assert all(t.local.synced_at == h for t in sites)
    assert not sites[0].local.before_step(sites[0])  # step 5 < 3 + 3: nothing due yet


def test_without_inner_steps_under_it_the_overlap_is_the_synchronous_outer_step():
    # a one-site run: D's inner steps moved nothing only if none ran; force that by
    # completing at once, then the model must be the new reference, as without overlap
    plain, over = site(5, 2, None), site(5, 2, 2)
    for t in (plain, over):
        t.train_step(), t.train_step()
    assert plain.local.before_step(plain) and over.local.before_step(over)
    over.local.complete()
    assert all(torch.equal(a, b) for a, b in zip(weights(plain), weights(over), strict=True))
    assert all(torch.equal(p, r) for p, r in zip(over.model.parameters(), over.local.reference))


def test_an_exchange_in_flight_is_training_state():
    first = site(5, 2, 2)
    for _ in range(3):  # launched at step 2, due at step 4: in flight now
        first.train_step()
    assert first.local.pending is not None
    saved = copy.deepcopy(training_state(first))
    second = site(5, 2, 2)
    load_training_state(second, saved)
    assert second.local.pending.launched_at == 2
    for t in (first, second):
        for _ in range(4):
            t.train_step()
        t.local.finish(t)
    assert all(torch.equal(a, b) for a, b in zip(weights(first), weights(second), strict=True))
    lost = site(5, 2, 2)  # without the exchange in flight the same steps end elsewhere
    state = copy.deepcopy(saved)
    del state["local_update"]["pending"]
    load_training_state(lost, state)
    for _ in range(4):
        lost.train_step()
    lost.local.finish(lost)
    assert not all(torch.equal(a, b) for a, b in zip(weights(first), weights(lost), strict=True))


@pytest.mark.parametrize("h, d", [(None, 1), (4, 5), (4, 0), (4, 1.5)])
def test_an_overlap_outside_one_to_h_is_refused(h, d):
    with pytest.raises(UserError, match="--outer-overlap"):
        SlowLinkConfig(local_steps=h, outer_overlap=d)
