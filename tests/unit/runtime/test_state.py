"""The training state carries everything the next step reads: a member that loads it (a joiner
from a peer, a resumed run from a checkpoint) continues bit for bit."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import shoal
from shoal.runtime.checkpoint import snapshot
from shoal.runtime.state import load_training_state, state_sha256, training_state
from shoal.runtime.trainer import Trainer
from shoal.runtime.transfer import deserialize, serialize


class Counting(nn.Module):
    """A buffer registered with persistent=False (so not in state_dict) that forward changes."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.register_buffer("calls", torch.zeros(()), persistent=False)

    def forward(self, x):
        self.calls += 1
        return self.linear(x) / self.calls


def job(**fields) -> shoal.Job:
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(x, torch.arange(32) % 2)
    return shoal.Job(
        **fields,
        model=Counting,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        dataset=data,
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=4,
        global_batch_size=8,
    )


def test_a_buffer_left_out_of_state_dict_travels_with_the_state():
    first = Trainer(job())
    for _ in range(3):
        first.train_step()
    joiner = Trainer(job())  # built afresh: calls = 0
    load_training_state(joiner, deserialize(serialize(snapshot(training_state(first)))))
    assert joiner.model.calls.item() == first.model.calls.item() == 3
    first.train_step(), joiner.train_step()
    assert state_sha256(joiner.model, joiner.optimizer) == state_sha256(
        first.model, first.optimizer
    )


def test_a_state_saved_before_it_carried_them_still_loads():
    first = Trainer(job())
    first.train_step()
    state = training_state(first)
    del state["unsaved_buffers"]
    load_training_state(Trainer(job()), state)


def cosine(optimizer):
    """A cosine schedule written with numpy: its rates are np.float64, in the optimizer's
    param groups and the scheduler's state."""
    rate = lambda s: 0.5 * (1 + np.cos(np.pi * s / 10))  # noqa: E731
    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def test_numpy_numbers_in_the_state_load_as_weights_only_loads_them():
    first = Trainer(job(lr_scheduler=cosine))
    for _ in range(2):
        first.train_step()
    assert isinstance(first.optimizer.param_groups[0]["lr"], np.float64)
    joiner = Trainer(job(lr_scheduler=cosine))
    load_training_state(joiner, deserialize(serialize(training_state(first))))  # refused before
    first.train_step(), joiner.train_step()
    assert state_sha256(joiner.model, joiner.optimizer) == state_sha256(
        first.model, first.optimizer
    )
