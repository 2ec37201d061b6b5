"""A job for the same-build tests: a model whose parts are named by a set (the order of a set of
strings follows the process's hash seed), or, with -o init=pid, whose initial weights are drawn
from a generator seeded by the process id (every worker then builds other values)."""

import os

import torch
import torch.nn.functional as F
from torch import nn

import shoal

NAMES = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}


class Parts(nn.Module):
    def __init__(self, init: str):
        super().__init__()
        self.parts = nn.ModuleDict({name: nn.Linear(3, 2) for name in NAMES})
        if init == "pid":
            generator = torch.Generator().manual_seed(os.getpid())
            for p in self.parameters():
                p.data = torch.randn(p.shape, generator=generator)

    def forward(self, x):
        return sum(part(x) for part in self.parts.values())


def make_job(init="seeded"):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 3, generator=g), torch.arange(64) % 2
    return shoal.Job(
        model=lambda: Parts(init),
        optimizer=lambda p: torch.optim.Adam(p, lr=0.05),
        dataset=torch.utils.data.TensorDataset(x, y),
        loss_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1]),
        micro_batch_size=4,
        global_batch_size=16,
    )
