"""--pipeline's staleness arithmetic, in one process (one site: the merge is bitwise the dense
mean): step t applies the gradient computed at step t-1, so w_{t+1} = w_t - lr * g(w_{t-1}),
with nothing applied at step 0; the pending packets are training state."""

import copy

import pytest
import torch
import torch.nn.functional as F

import shoal
from shoal.config import SlowLinkConfig
from shoal.errors import UserError
from shoal.runtime.state import load_training_state, training_state
from shoal.runtime.trainer import Trainer

B, b, LR = 16, 4, 0.1


def job() -> shoal.Job:
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(x, torch.arange(64) % 2)
    return shoal.Job(
        model=lambda: torch.nn.Linear(3, 2),
        optimizer=lambda params: torch.optim.SGD(params, lr=LR),
        dataset=data,
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=b,
        global_batch_size=B,
        seed=3,
    )


def weights(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def mean_gradient(trainer: Trainer, at: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    """Plain autograd: the mean gradient of `step`'s micro-batches at the weights `at`."""
    model = copy.deepcopy(trainer.model)
    with torch.no_grad():
        for p, w in zip(model.parameters(), at, strict=True):
            p.copy_(w)
            p.grad = None
    M = B // b
    for j in range(M):
        _, batch = trainer._micro_batch(step, step * B, j)
        (trainer.job.loss_fn(model, batch) / M).backward()
    return [p.grad for p in model.parameters()]


def test_step_t_applies_the_gradient_of_step_t_minus_1():
    dense = Trainer(job(), link=SlowLinkConfig(compress="blocktopk:0.1"))
    piped = Trainer(job(), link=SlowLinkConfig(compress="blocktopk:0.1", pipeline=True))
    w0 = weights(piped)
    dense.train_step()
    w1_dense = weights(dense)
    piped.train_step()
    assert all(torch.equal(a, c) for a, c in zip(weights(piped), w0, strict=True))  # no update
    piped.train_step()
    # step 1 applied step 0's gradient, taken at w0: what the dense run applied at step 0
    assert all(torch.equal(a, c) for a, c in zip(weights(piped), w1_dense, strict=True))
    piped.train_step()
    # step 2 applied step 1's gradient, taken at w1 = w0 (stale), not at the dense run's w1
    g0, g1 = mean_gradient(piped, w0, 0), mean_gradient(piped, w0, 1)
    expected = [w - LR * (a + c) for w, a, c in zip(w0, g0, g1, strict=True)]
    for got, want in zip(weights(piped), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    dense.train_step()
    assert not all(torch.equal(a, c) for a, c in zip(weights(piped), weights(dense), strict=True))


def test_the_pending_packets_are_training_state():
    link = SlowLinkConfig(compress="topk:0.5", pipeline=True)
    first = Trainer(job(), link=link)
    for _ in range(3):
        first.train_step()
    state = copy.deepcopy(training_state(first))
    assert "pending" in state["reducer"]["sites"]["feedback"]["0"]
    resumed = Trainer(job(), link=link)
    load_training_state(resumed, state)
    for _ in range(2):
        first.train_step()
        resumed.train_step()
    assert all(torch.equal(a, c) for a, c in zip(weights(first), weights(resumed), strict=True))


@pytest.mark.parametrize("compress", ["none", "auto"])
def test_pipeline_needs_a_fixed_compression(compress):
    with pytest.raises(UserError, match="--pipeline needs"):
        SlowLinkConfig(compress=compress, pipeline=True)
