"""Row-parallel cases that need care (run inside 2 gloo processes by test_schedule_dist.py).

A row-parallel convolution with a bias must add the bias once, after the all-reduce; a module
reachable by two paths (one object held by two parents) must get its collective on both paths.
Outputs and gradients are compared with the unscheduled model, as in `sched_tp_cases`.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from sched_tp_cases import _compare_params, _run, _slice, close
from torch import nn

import shoal.schedule as slapo


def _row_conv_case(rank: int, conv: nn.Module, shape: tuple[int, ...], in_axis: int) -> None:
    torch.manual_seed(0)
    ref = nn.Sequential(conv)
    sch = slapo.create_schedule(copy.deepcopy(ref))
    sch["0"].shard("weight", axis=in_axis)  # split by input channels: partial output
    sch["0"].sync("fwd_post", "all_reduce")
    torch.manual_seed(1)
    x = torch.randn(*shape)
    g = torch.randn_like(ref(x))
    out, _ = _run(sch.mod, _slice(x, 1, rank), g)  # each rank holds its input channels
    out_ref, _ = _run(ref, x, g)
    close(out, out_ref)  # the bias is in once, not world_size times
    _compare_params(sch.mod, ref, rank)


def row_conv_bias(rank: int) -> None:
    """Conv1d/Conv2d split on weight axis 1, ConvTranspose2d on axis 0 (its input channels)."""
    _row_conv_case(rank, nn.Conv1d(8, 4, 3, padding=1), (2, 8, 6), 1)
    _row_conv_case(rank, nn.Conv2d(8, 4, 3, padding=1), (2, 8, 6, 6), 1)
    _row_conv_case(rank, nn.ConvTranspose2d(8, 4, 3), (2, 8, 5, 5), 0)


class Shared(nn.Module):
    """`fc2` is reachable as "fc2" and as "inner.b" (one module, two parents)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)
        self.inner = nn.Sequential()
        self.inner.add_module("a", self.fc1)
        self.inner.add_module("r", nn.ReLU())
        self.inner.add_module("b", self.fc2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x))) + self.inner(x)


def shared_row_linear(rank: int) -> None:
    torch.manual_seed(0)
    ref = Shared()
    sch = slapo.create_schedule(copy.deepcopy(ref))
    sch["fc1"].shard(["weight", "bias"], axis=0)
    sch["fc1"].sync("bwd_post", "all_reduce")
    sch["fc2"].shard("weight", axis=1)
    sch["fc2"].sync("fwd_post", "all_reduce")
    assert sch.mod.inner.b is sch.mod.fc2, type(sch.mod.inner.b)
    torch.manual_seed(1)
    x, g = torch.randn(3, 8), torch.randn(3, 8)
    out, gx = _run(sch.mod, x, g)
    out_ref, gx_ref = _run(ref, x, g)
    close(out, out_ref)
    close(gx, gx_ref)
    _compare_params(sch.mod, ref, rank)


CASES = {
    "row_conv_bias": row_conv_bias,
    "shared_row_linear": shared_row_linear,
}
