"""`sch.shard(tensor_name, axis)`: keep this rank's slice of a parameter or buffer.

The tensor is split into `world_size` equal chunks along `axis` (list form: several tensors on
the same axis). The chunk becomes a new `nn.Parameter` everywhere the old one was referenced
(tied weights stay tied), tagged with `orig_shape` and the shard axis; parameter tags recorded
with `annotate` are copied. The module's size attributes and its output layout are then updated
(`sharding.shard_ops`) so that `sync` can be validated.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import schedule_error
from ..sharding.dtensor import record
from ..sharding.shard_ops import infer_output, postproc
from ..swap import swap_everywhere
from .base import Primitive, register_primitive


@register_primitive()
class ShardPrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "shard"

    @staticmethod
    def init_metadata() -> dict:
        return {"sharded": {}, "output_type": None, "gather_axis": None}

    @staticmethod
    def is_verifiable() -> bool:
        return True

    @staticmethod
    def apply(sch: Any, tensor_name: str | list[str], axis: int) -> None:
        names = [tensor_name] if isinstance(tensor_name, str) else list(tensor_name)
        for name in names:
            if sch.backend == "dtensor":
                _check(sch, name, axis)
                record(sch, "shard", (name, axis % getattr(sch.mod, name).dim()))
            else:
                _shard_one(sch, name, axis)


def _check(sch: Any, name: str, axis: int) -> None:
    prim = f"shard({name!r}, axis={axis})"
    tensor = sch.mod._parameters.get(name, sch.mod._buffers.get(name))
    if tensor is None:
        raise schedule_error(
            prim, sch.path, f"{type(sch.mod).__name__} has no parameter or buffer named {name!r}"
        )
    if tensor.shape[axis] % sch.world_size:
        raise schedule_error(
            prim,
            sch.path,
            f"dimension {axis} of {name} has size {tensor.shape[axis]}, "
            f"which is not divisible by the world size {sch.world_size}",
        )


def _shard_one(sch: Any, name: str, axis: int) -> None:
    prim = f"shard({name!r}, axis={axis})"
    mod = sch.mod
    tensor = mod._parameters.get(name, mod._buffers.get(name))
    if tensor is None:
        raise schedule_error(
            prim, sch.path, f"{type(mod).__name__} has no parameter or buffer named {name!r}"
        )
    if not -tensor.dim() <= axis < tensor.dim():
        raise schedule_error(prim, sch.path, f"axis out of range for shape {tuple(tensor.shape)}")
    axis %= tensor.dim()
    meta = sch.metadata.primitives.setdefault("shard", ShardPrimitive.init_metadata())
    done = getattr(tensor, "shard_axis", None)
    if done is not None:  # a tied tensor already sharded through another module
        if done != axis:
            raise schedule_error(prim, sch.path, f"already sharded along axis {done}")
    else:
        ws, rank = sch.world_size, sch.rank
        if tensor.shape[axis] % ws:
            raise schedule_error(
                prim,
                sch.path,
                f"dimension {axis} of {name} has size {tensor.shape[axis]}, "
                f"which is not divisible by the world size {ws}",
            )
        size = tensor.shape[axis] // ws
        chunk = tensor.detach().narrow(axis, rank * size, size).clone()
        if isinstance(tensor, nn.Parameter):
            new = nn.Parameter(chunk, requires_grad=tensor.requires_grad)
        else:
            new = chunk
        top = sch.get_top_schedule()
        for tag in top.metadata.param_tags:
            if hasattr(tensor, tag):
                setattr(new, tag, getattr(tensor, tag))
        new.orig_shape = tuple(tensor.shape)
        new.shard_axis = axis
        new.shard_source_id = getattr(tensor, "shard_source_id", id(tensor))
        holders = swap_everywhere(top.mod, tensor, new)
        if len(holders) > 1:
            top.metadata.tie_weights[id(new)] = name
        table = mod._parameters if name in mod._parameters else mod._buffers
        table[name] = new  # also when `mod` is not reachable from the root
        for holder in holders:  # a tied module's sizes follow the shared tensor too
            postproc(holder)
    postproc(mod)
    meta["sharded"][name] = axis
    out_type, gather_axis = infer_output(mod, name, axis)
    if out_type is not None:
        meta["output_type"], meta["gather_axis"] = out_type, gather_axis
