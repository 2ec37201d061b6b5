"""The schedule for `shoal.models.wideresnet.WideResNet`: channel tensor parallelism and
checkpointing.

In every residual block, `conv1` is split by output channels (its input gradient all-reduced),
`bn2` holds the matching slice of per-channel parameters and running statistics (exact, since
batch statistics are per channel), and `conv2` is split by input channels with its partial output
all-reduced. The stem, shortcuts, the final BatchNorm and the classifier stay replicated. The
first `int(len(blocks) * ckpt_ratio)` blocks are activation-checkpointed. The model has no q/k/v
projections to fuse; `fusion=True` warns that it has no effect here.
"""

from __future__ import annotations

import warnings
from typing import Any

from torch import nn

import shoal.schedule as slapo


def schedule(sch: Any, *, ckpt_ratio: float = 0.0) -> None:
    """The WideResNet schedule proper (the lines counted in the lines-of-code table)."""
    n_block = len(sch.mod.blocks)
    for i in range(n_block):
        if sch.world_size > 1:
            sch[f"blocks.{i}.conv1"].shard("weight", axis=0)
            sch[f"blocks.{i}.conv1"].sync("bwd_post", "all_reduce")
            sch[f"blocks.{i}.bn2"].shard(["weight", "bias", "running_mean", "running_var"], axis=0)
            sch[f"blocks.{i}.conv2"].shard("weight", axis=1)
            sch[f"blocks.{i}.conv2"].sync("fwd_post", "all_reduce")
        if i < int(n_block * ckpt_ratio):
            sch[f"blocks.{i}"].checkpoint()


def apply_schedule(
    model: nn.Module,
    *,
    ckpt_ratio: float = 0.0,
    fusion: bool = False,
    group: Any = None,
) -> Any:
    """Schedule `model` (a `WideResNet`) over `group`; returns the `Schedule`."""
    if not 0.0 <= ckpt_ratio <= 1.0:
        raise ValueError(f"ckpt_ratio must be in [0, 1], got {ckpt_ratio}")
    if fusion:
        warnings.warn("fusion has no effect on WideResNet (no q/k/v to fuse)", stacklevel=2)
    sch = slapo.create_schedule(model, group=group)
    schedule(sch, ckpt_ratio=ckpt_ratio)
    return sch
