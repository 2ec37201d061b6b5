"""`Print`: an fx leaf that prints a tensor's summary at run time (debugging schedules).

A plain f-string of a traced value prints ``Proxy(add)`` at trace time; as a leaf module the
print happens when the graph actually runs.
"""

from __future__ import annotations

import torch
from torch import nn


class Print(nn.Module):
    """Identity that prints ``message`` and the tensor's shape and dtype."""

    traceable = False

    def __init__(self, message: str = "") -> None:
        super().__init__()
        self.message = message

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print(f"{self.message} shape={tuple(x.shape)} dtype={x.dtype}")
        return x
