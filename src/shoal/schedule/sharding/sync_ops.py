"""Megatron-style conjugate collectives as autograd Functions.

Each forward collective is paired with the collective its gradient needs: an all-reduce in the
forward has an identity backward and vice versa; an all-gather's backward is a reduce-scatter
(or a plain split when the output gradient is replicated), a reduce-scatter's backward an
all-gather, a scatter's backward an all-gather. (`torch.distributed.nn.functional` uses other
backward rules, e.g. all-reduce <-> all-reduce, which double-count under tensor parallelism.)
"""

from __future__ import annotations

from typing import Any

import torch

from . import collectives as C


class _ReduceForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return C.all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ReduceBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return C.all_reduce(grad, ctx.group), None


class _GatherForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group, tensor_parallel_output_grad):
        ctx.dim, ctx.group, ctx.tp_grad = dim, group, tensor_parallel_output_grad
        return C.all_gather_along(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        if ctx.tp_grad:
            return C.reduce_scatter_along(grad, ctx.dim, ctx.group), None, None, None
        return C.split_along(grad, ctx.dim, ctx.group), None, None, None


class _ReduceScatterForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return C.reduce_scatter_along(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return C.all_gather_along(grad, ctx.dim, ctx.group), None, None


class _ScatterForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return C.split_along(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return C.all_gather_along(grad, ctx.dim, ctx.group), None, None


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scatter_dim, gather_dim, group):
        ctx.dims, ctx.group = (scatter_dim, gather_dim), group
        return C.all_to_all_along(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx, grad):
        scatter_dim, gather_dim = ctx.dims
        return C.all_to_all_along(grad, gather_dim, scatter_dim, ctx.group), None, None, None


def reduce_forward_output(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """All-reduce in the forward, identity in the backward (Megatron's "g")."""
    return _ReduceForward.apply(x, group)


def reduce_backward_grad(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Identity in the forward, all-reduce of the gradient in the backward (Megatron's "f")."""
    return _ReduceBackward.apply(x, group)


def all_gather_forward_output(
    x: torch.Tensor, dim: int, group: Any = None, tensor_parallel_output_grad: bool = True
) -> torch.Tensor:
    """All-gather along `dim`; backward reduce-scatters (or splits, if the grad is replicated)."""
    return _GatherForward.apply(x, dim, group, tensor_parallel_output_grad)


def reduce_scatter_forward_output(x: torch.Tensor, dim: int, group: Any = None) -> torch.Tensor:
    """Reduce-scatter along `dim`; backward all-gathers."""
    return _ReduceScatterForward.apply(x, dim, group)


def scatter_forward_output(x: torch.Tensor, dim: int, group: Any = None) -> torch.Tensor:
    """Keep this rank's chunk along `dim`; backward all-gathers."""
    return _ScatterForward.apply(x, dim, group)


def all_to_all_forward(
    x: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any = None
) -> torch.Tensor:
    """Re-partition from `gather_dim`-sharded to `scatter_dim`-sharded; backward is the inverse."""
    return _AllToAll.apply(x, scatter_dim, gather_dim, group)


# other names programs use for the same operations
reduce_backward_input = reduce_backward_grad
gather_forward_output = all_gather_forward_output
