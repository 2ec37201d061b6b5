"""Device-agnostic tensor collectives along an arbitrary dimension, with gloo fallbacks.

`all_gather_into_tensor` / `reduce_scatter_tensor` are tried first; if the backend rejects them
(older gloo builds), the list-based `all_gather` + `cat` and `all_reduce` + slice are used and
the choice is remembered per backend. Every function is a no-op for a single process.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

_UNSUPPORTED: set[tuple[str, str]] = set()


def world_size(group: Any = None) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def rank(group: Any = None) -> int:
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def _backend(group: Any) -> str:
    return str(dist.get_backend(group))


def all_reduce(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Sum over the group (returns a new tensor; the input is left alone)."""
    out = tensor.clone()
    if world_size(group) > 1:
        dist.all_reduce(out, group=group)
    return out


def all_gather_along(tensor: torch.Tensor, dim: int, group: Any = None) -> torch.Tensor:
    """Concatenate every rank's `tensor` along `dim`."""
    ws = world_size(group)
    if ws == 1:
        return tensor
    dim = dim % tensor.dim()
    moved = tensor.transpose(0, dim).contiguous()
    key = (_backend(group), "all_gather_into_tensor")
    if key not in _UNSUPPORTED:
        out = moved.new_empty((ws * moved.shape[0], *moved.shape[1:]))
        try:
            dist.all_gather_into_tensor(out, moved, group=group)
            return out.transpose(0, dim).contiguous()
        except (RuntimeError, NotImplementedError, ValueError):
            _UNSUPPORTED.add(key)
    parts = [torch.empty_like(moved) for _ in range(ws)]
    dist.all_gather(parts, moved, group=group)
    return torch.cat(parts, dim=0).transpose(0, dim).contiguous()


def split_along(tensor: torch.Tensor, dim: int, group: Any = None) -> torch.Tensor:
    """This rank's equal chunk of `tensor` along `dim`."""
    ws = world_size(group)
    if ws == 1:
        return tensor
    if tensor.shape[dim] % ws:
        raise ValueError(f"dimension {dim} of size {tensor.shape[dim]} not divisible by {ws}")
    return tensor.chunk(ws, dim=dim)[rank(group)].contiguous()


def reduce_scatter_along(tensor: torch.Tensor, dim: int, group: Any = None) -> torch.Tensor:
    """Sum over the group, keep this rank's chunk along `dim`."""
    ws = world_size(group)
    if ws == 1:
        return tensor
    dim = dim % tensor.dim()
    if tensor.shape[dim] % ws:
        raise ValueError(f"dimension {dim} of size {tensor.shape[dim]} not divisible by {ws}")
    moved = tensor.transpose(0, dim).contiguous()
    key = (_backend(group), "reduce_scatter_tensor")
    if key not in _UNSUPPORTED:
        out = moved.new_empty((moved.shape[0] // ws, *moved.shape[1:]))
        try:
            dist.reduce_scatter_tensor(out, moved, group=group)
            return out.transpose(0, dim).contiguous()
        except (RuntimeError, NotImplementedError, ValueError):
            _UNSUPPORTED.add(key)
    return split_along(all_reduce(tensor, group), dim, group)


def all_to_all_along(
    tensor: torch.Tensor, scatter_dim: int, gather_dim: int, group: Any = None
) -> torch.Tensor:
    """Split along `scatter_dim`, exchange, and concatenate the received chunks on `gather_dim`."""
    ws = world_size(group)
    if ws == 1:
        return tensor
    inputs = [c.contiguous() for c in tensor.chunk(ws, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(ws)]
    dist.all_to_all(outputs, inputs, group=group)
    return torch.cat(outputs, dim=gather_dim).contiguous()


def first_rank(group: Any = None) -> int:
    """Global rank of the group's first member (the broadcast source)."""
    return 0 if group is None else dist.get_global_rank(group, 0)
