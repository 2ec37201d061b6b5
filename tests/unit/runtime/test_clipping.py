"""Job.clip_grad_norm: the step's gradient scaled as torch.nn.utils.clip_grad_norm_ scales it
(that every layout of workers scales it alike: tests/dist/test_exact_layouts.py)."""

import math

import pytest
import torch

from shoal.runtime.clipping import clip_grad_norm


def params_with(*grads: torch.Tensor) -> list[torch.nn.Parameter]:
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros_like(g))
        p.grad = g.clone()
        params.append(p)
    return params


def test_a_large_gradient_is_scaled_to_the_norm_as_torch_scales_it():
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(50, 7, generator=gen) * 10, torch.randn(13, generator=gen), torch.zeros(0)]
    ours, theirs = params_with(*grads), params_with(*grads)
    norm = clip_grad_norm(ours, 0.5)
    torch_norm = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    assert norm == pytest.approx(float(torch_norm), rel=1e-6) and norm > 0.5
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)
    after = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in ours))
    assert after == pytest.approx(0.5, rel=1e-5)


def test_a_gradient_within_the_norm_is_left_bit_for_bit():
    grads = [torch.tensor([0.1, -0.2]), torch.tensor([[0.05]])]
    params = params_with(*grads)
    assert clip_grad_norm(params, 1.0) == pytest.approx(math.sqrt(0.01 + 0.04 + 0.0025))
    assert all(torch.equal(p.grad, g) for p, g in zip(params, grads, strict=True))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_gradient_is_not_scaled(bad):
    params = params_with(torch.tensor([1.0, bad]), torch.tensor([100.0]))
    norm = clip_grad_norm(params, 1.0)
    assert not math.isfinite(norm) and params[1].grad.item() == 100.0  # (inf: not zeroed)


def test_parameters_without_a_gradient_are_skipped():
    frozen = torch.nn.Parameter(torch.ones(3))
    params = [frozen, *params_with(torch.tensor([3.0, 4.0]))]
    assert clip_grad_norm(params, 1.0) == pytest.approx(5.0)
    assert frozen.grad is None
    torch.testing.assert_close(params[1].grad, torch.tensor([0.6, 0.8]))
