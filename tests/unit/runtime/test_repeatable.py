"""Job code whose numbers escape shoal's seeding (a generator of its own, a Python counter) made
the digest depend on the workers, silently: it is refused in one line, at a worker's start (the
reads) or at the first step (the forward pass, which exact mode computes twice anyway)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shoal
from shoal.errors import UserError
from shoal.runtime.repeatable import check_passes
from shoal.runtime.trainer import Trainer

X = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
Y = torch.arange(32) % 2


class Pairs(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return len(Y)

    def __getitem__(self, i: int):
        return X[i] + torch.rand(3), Y[i]  # augmentation from torch's global generator: seeded


class OwnGenerator(Pairs):
    """Augmentation from a generator of the dataset's own, as is common: not seeded by shoal."""

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __getitem__(self, i: int):
        return X[i] + float(self.rng.normal()), Y[i]


class Records(Pairs):
    """Dict samples with names and missing values (NaN), collated by the default collate."""

    def __getitem__(self, i: int):
        x = X[i].clone()
        x[0] = math.nan
        return {"x": x, "y": Y[i], "name": f"s{i}", "w": np.full(2, math.nan)}


class Counted(nn.Linear):
    """A forward pass that depends on a Python attribute it changes: per process state."""

    calls = 0

    def forward(self, x):
        self.calls += 1
        return super().forward(x) / self.calls


class Noisy(nn.Linear):
    """Noise from a generator of the module's own."""

    def __init__(self, *args):
        super().__init__(*args)
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, x):
        return super().forward(x + torch.rand(x.shape, generator=self.generator))


class Drifting(nn.Linear):
    """A running mean kept in a frozen parameter (a buffer would be restored per micro-batch)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.center = nn.Parameter(torch.zeros(3), requires_grad=False)

    def forward(self, x):
        self.center.data.mul_(0.9).add_(0.1 * x.mean(0))
        return super().forward(x - self.center)


def job(dataset=None, model=lambda: nn.Linear(3, 2)) -> shoal.Job:
    def loss(model, batch):
        x, y = (batch["x"].nan_to_num(), batch["y"]) if isinstance(batch, dict) else batch
        return F.cross_entropy(model(x), y)

    return shoal.Job(
        model=model,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        dataset=dataset or Pairs(),
        loss_fn=loss,
        micro_batch_size=4,
        global_batch_size=8,
    )


@pytest.mark.parametrize("dataset", [Pairs(), Records()])
def test_reads_drawn_from_the_seeded_generators_pass(dataset):
    trainer = Trainer(job(dataset))
    trainer.check_reads()
    trainer.train_step()


def test_a_dataset_with_a_generator_of_its_own_is_refused():
    with pytest.raises(UserError, match="Job.dataset .*default_rng") as info:
        Trainer(job(OwnGenerator())).check_reads()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("model", [Counted, Noisy, Drifting])
def test_a_forward_pass_that_escapes_the_seeding_is_refused_at_the_first_step(model):
    trainer = Trainer(job(model=lambda: model(3, 2)))
    with pytest.raises(UserError, match="Job.loss_fn .*micro-batch 0 of step 0") as info:
        trainer.train_step()
    assert "\n" not in str(info.value) and trainer.step == 0


def test_a_nan_loss_repeated_is_the_same_loss():
    check_passes(0, {0: math.nan, 1: 0.5}, {0: math.nan, 1: 0.5})
    with pytest.raises(UserError):
        check_passes(0, {0: math.nan}, {0: 0.5})
