"""Tiny models shared by the schedule unit tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, 2 * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class FunctionalMLP(nn.Module):
    """Same computation as `MLP` but with functional activations."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, 2 * hidden)
        self.fc2 = nn.Linear(2 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class QKV(nn.Module):
    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x) * self.k(x) + self.v(x)


class Net(nn.Module):
    def __init__(self, hidden: int = 8, depth: int = 2) -> None:
        super().__init__()
        self.num_layers = depth
        self.layers = nn.ModuleList(MLP(hidden) for _ in range(depth))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class Untraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow: fx cannot trace this
            return self.fc(x)
        return x


class Shared(nn.Module):
    """`fc1`/`fc2` are also reachable as `inner.a`/`inner.b`: one module held by two parents."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, 2 * hidden)
        self.fc2 = nn.Linear(2 * hidden, hidden)
        self.inner = nn.Sequential()
        self.inner.add_module("a", self.fc1)
        self.inner.add_module("r", nn.ReLU())
        self.inner.add_module("b", self.fc2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x))) + self.inner(x)
