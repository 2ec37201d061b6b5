"""Linear-layer variants used by schedules.

`LinearWithSeparateBias` exposes the bias add as its own fx op (for `decompose` + `fuse`);
`LinearWithSyncFunc` runs a collective between the matmul and the bias add, so a row-parallel
layer adds its bias once after the sum instead of once per rank; `LinearWithAct` and
`LinearWithDropout` fold an activation or a dropout into the layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _share_params(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight = src.weight
    dst.bias = src.bias


class LinearWithSeparateBias(nn.Linear):
    """``x @ W^T`` then ``+ bias`` as two traceable ops."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight)
        if self.bias is not None:
            out = out + self.bias
        return out

    @classmethod
    def from_linear(cls, lin: nn.Linear) -> LinearWithSeparateBias:
        new = cls(lin.in_features, lin.out_features, bias=lin.bias is not None, device="meta")
        _share_params(new, lin)
        return new


class LinearWithSyncFunc(nn.Linear):
    """``sync_fn(x @ W^T) + bias``: the collective sees the bias-free partial product."""

    traceable = False  # the collective is an autograd Function fx cannot trace through

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        sync_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.sync_fn = sync_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight)
        if self.sync_fn is not None:
            out = self.sync_fn(out)
        if self.bias is not None:
            out = out + self.bias
        return out

    @classmethod
    def from_linear(cls, lin: nn.Linear, sync_fn: Callable) -> LinearWithSyncFunc:
        new = cls(lin.in_features, lin.out_features, lin.bias is not None, "meta", sync_fn=sync_fn)
        _share_params(new, lin)
        return new


class LinearWithAct(nn.Linear):
    """``act(x @ W^T + bias)`` with `act` one of "gelu", "relu", "silu" or a callable."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        act_fn: str | Callable = "gelu",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        acts = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}
        self.act = acts[act_fn] if isinstance(act_fn, str) else act_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(F.linear(x, self.weight, self.bias))


class LinearWithDropout(nn.Linear):
    """``dropout(x @ W^T + bias)``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        p: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(F.linear(x, self.weight, self.bias), self.p, self.training)
