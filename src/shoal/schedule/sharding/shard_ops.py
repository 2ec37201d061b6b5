"""What sharding a parameter means for a module: its new sizes and its output's layout.

After a parameter is split, `postproc` rewrites the size attributes (`out_features`,
`num_embeddings`, `out_channels`, `num_features`, HF `Conv1D.nf`) from the new shapes, and
`infer_output` tells whether the module now produces a *partition* (a slice of the full output,
to be gathered along an axis) or a *partial* result (a full-shape tensor to be summed), and
`partial_bias` gives the bias that `sync` must add once after that sum. `validate_sync` uses
them to reject collectives that would compute something else.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

PARTITION, PARTIAL = "partition", "partial"

# module classes whose sharding rules are known (others are not validated)
KNOWN = (
    nn.Linear,
    nn.Embedding,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
)


def is_hf_conv1d(mod: nn.Module) -> bool:
    return type(mod).__name__ == "Conv1D" and hasattr(mod, "nf")


def is_known(mod: nn.Module) -> bool:
    return isinstance(mod, KNOWN) or is_hf_conv1d(mod)


def postproc(mod: nn.Module) -> None:
    """Make the module's size attributes agree with its (possibly sharded) parameters."""
    weight = getattr(mod, "weight", None)
    if weight is None:
        return
    if isinstance(mod, nn.Linear):
        mod.out_features, mod.in_features = weight.shape[0], weight.shape[1]
    elif isinstance(mod, nn.Embedding):
        mod.num_embeddings, mod.embedding_dim = weight.shape
    elif isinstance(mod, nn.modules.conv._ConvNd):
        channels = (weight.shape[0], weight.shape[1] * mod.groups)
        if mod.transposed:
            channels = (weight.shape[1] * mod.groups, weight.shape[0])
        mod.out_channels, mod.in_channels = channels
    elif isinstance(mod, nn.modules.batchnorm._BatchNorm):
        mod.num_features = weight.shape[0]
    elif is_hf_conv1d(mod):
        mod.nf = weight.shape[1]


def infer_output(mod: nn.Module, tensor_name: str, axis: int) -> tuple[str | None, int | None]:
    """(output type, gather axis) after sharding `tensor_name` on `axis`; (None, None) if unknown.

    A gather axis of -1 means "the last dimension of the output".
    """
    if isinstance(mod, nn.Linear):
        if tensor_name == "bias" or axis == 0:
            return PARTITION, -1
        return PARTIAL, None
    if isinstance(mod, nn.Embedding):
        return (PARTITION, -1) if axis == 1 else (PARTIAL, None)
    if is_hf_conv1d(mod):  # weight is (in, out)
        if tensor_name == "bias" or axis == 1:
            return PARTITION, -1
        return PARTIAL, None
    if isinstance(mod, nn.modules.conv._ConvNd):
        out_axis = 1 if mod.transposed else 0
        if tensor_name == "bias" or axis == out_axis:
            return PARTITION, 1
        return PARTIAL, None
    if isinstance(mod, nn.modules.batchnorm._BatchNorm):
        return PARTITION, 1
    return None, None


def partial_bias(mod: nn.Module) -> torch.Tensor | None:
    """The bias of a module, shaped to broadcast against its output (None if it has none).

    A row-parallel module (partial output) adds its replicated bias on every rank, so `sync`
    must add it once, after the sum: Linear and HF Conv1D outputs end in the bias axis; a
    convolution's channels are followed by its spatial axes."""
    bias = getattr(mod, "bias", None)
    if not isinstance(bias, torch.Tensor):
        return None
    if isinstance(mod, nn.modules.conv._ConvNd):
        return bias.view(-1, *[1] * len(mod.kernel_size))
    return bias


def _bias_axis(mod: nn.Module) -> int | None:
    """The output axis a partial output's bias runs along (as `infer_output` numbers axes)."""
    if partial_bias(mod) is None:
        return None
    return 1 if isinstance(mod, nn.modules.conv._ConvNd) else -1


def _after_linear(mod: nn.Module) -> str | None:
    """What a fused linear module applies after its matmul (`op.linear`'s LinearWithAct and
    LinearWithDropout), or None for a plain one."""
    from ..op.linear import LinearWithAct, LinearWithDropout

    if isinstance(mod, LinearWithAct):
        return "an activation"
    if isinstance(mod, LinearWithDropout) and mod.p > 0:
        return "dropout"
    return None


def validate_sync(mod: nn.Module, info: dict, mode: str, op: str, axis: Any) -> str | None:
    """A reason why `sync(mode, op)` is wrong for this module's sharding, or None if fine."""
    out_type = info.get("output_type")
    sharded = bool(info.get("sharded"))
    if not is_known(mod) and out_type is None:
        return None  # nothing known about this module: trust the user
    if not sharded:
        if mode == "fwd_post" and op in ("all_reduce", "all_gather", "reduce_scatter"):
            return f"the module has no sharded parameter: its output is replicated, {op} is wrong"
        if mode == "bwd_post" and op == "all_reduce":
            return "the module has no sharded parameter, so its input gradient is complete"
        return None
    if out_type == PARTIAL and mode == "fwd_post" and _after_linear(mod):
        # act(x_r @ W_r) summed over ranks is not act(x @ W): no collective after it mends that
        return f"it applies {_after_linear(mod)} to a partial sum; shard it on axis 0 instead"
    if out_type == PARTIAL and mode == "fwd_post" and op in ("all_gather", "scatter"):
        return "its output is partial (needs a sum), not a partition"
    if out_type == PARTIAL and mode == "fwd_post" and op == "reduce_scatter":
        if axis is not None and axis == _bias_axis(mod):
            return f"its bias is added once after the sum and needs all of axis {axis}"
    if out_type == PARTITION and mode == "fwd_post" and op in ("all_reduce", "reduce_scatter"):
        return "its output is a partition (needs a gather), not a partial sum"
    if out_type == PARTIAL and mode == "bwd_post" and op == "all_reduce":
        return "its input is already partitioned (row-parallel), so its gradient is too"
    if out_type == PARTIAL and mode == "fwd_pre" and op == "all_gather":
        return "it expects a partitioned input; gathering it first is wrong"
    gather_axis = info.get("gather_axis")
    if op == "all_gather" and mode == "fwd_post" and gather_axis not in (None, -1):
        if axis is not None and axis != gather_axis:
            return f"its output is partitioned on axis {gather_axis}, not {axis}"
    return None
