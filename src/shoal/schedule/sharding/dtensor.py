"""Optional DTensor backend: lower `shard`/`sync` pairs to `torch.distributed.tensor.parallel`.

With ``create_schedule(model, group=..., backend="dtensor")``, `shard` and `sync` only record
what the user asked for; `build` (and `Verify`) then turn each sharded module into one
`parallelize_module` call: a column split (weight axis 0) becomes `ColwiseParallel`, a row split
(axis 1) `RowwiseParallel`, a vocabulary split of an `nn.Embedding` `RowwiseParallel`; the syncs
select the layouts (``fwd_pre all_gather axis=a`` -> input ``Shard(a)``, ``fwd_post all_gather``
-> output ``Replicate()``, ``fwd_post reduce_scatter axis=a`` -> output ``Shard(a)``, ``fwd_pre
scatter`` -> replicated input of a row split). Parameters become DTensors (weights are taken
from the group's first rank); outputs stay plain local tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from ..errors import schedule_error

if TYPE_CHECKING:
    from ..schedule import Schedule

DTENSOR = "dtensor"


def _style(sch: Schedule, sharded: dict[str, int], syncs: list) -> Any:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    mod = sch.mod
    prim = "shard(backend='dtensor')"
    if not isinstance(mod, nn.Linear | nn.Embedding):
        raise schedule_error(prim, sch.path, f"supports nn.Linear/nn.Embedding, not {type(mod)}")
    axis = sharded.get("weight")
    if axis is None:
        raise schedule_error(prim, sch.path, "the weight must be sharded")
    column = (axis == 0) == isinstance(mod, nn.Linear)
    if column and isinstance(mod, nn.Linear) and mod.bias is not None and "bias" not in sharded:
        raise schedule_error(prim, sch.path, "a column split must shard the bias too")
    inputs, outputs = None, None
    for mode, op, kw in syncs:
        if (mode, op) in (("bwd_post", "all_reduce"), ("fwd_post", "all_reduce")):
            continue  # implied by the style
        if (mode, op) == ("fwd_pre", "all_gather"):
            inputs = Shard(kw["axis"])
        elif (mode, op) == ("fwd_pre", "scatter"):
            inputs = Replicate()
        elif (mode, op) == ("fwd_post", "all_gather"):
            outputs = Replicate()
        elif (mode, op) == ("fwd_post", "reduce_scatter"):
            outputs = Shard(kw["axis"])
        else:
            raise schedule_error(f"sync({mode!r}, {op!r})", sch.path, "not lowerable to DTensor")
    if column:
        return ColwiseParallel(
            input_layouts=inputs or Replicate(), output_layouts=outputs or Shard(-1)
        )
    default_in = Replicate() if isinstance(mod, nn.Embedding) else Shard(-1)
    return RowwiseParallel(
        input_layouts=inputs or default_in, output_layouts=outputs or Replicate()
    )


def apply_dtensor_plans(sch: Schedule) -> int:
    """Parallelize every module whose shards were recorded; returns how many were lowered."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import parallelize_module

    count = 0
    for _, sub in sch.named_schedules():
        meta = sub.metadata.primitives.get(DTENSOR)
        if not meta or not meta["sharded"]:
            continue
        style = _style(sub, meta["sharded"], meta["syncs"])
        param = next(iter(sub.mod.parameters()))
        device_type = param.device.type if not param.is_meta else "cpu"
        group = sub.group if sub.group is not None else dist.group.WORLD
        mesh = DeviceMesh.from_group(group, device_type)
        parallelize_module(sub.mod, mesh, style)
        meta["sharded"], meta["syncs"] = {}, []
        count += 1
    return count


def record(sch: Schedule, kind: str, item: Any) -> None:
    """Remember a shard (name, axis) or a sync (mode, op, kwargs) for later lowering."""
    meta = sch.metadata.primitives.setdefault(DTENSOR, {"sharded": {}, "syncs": []})
    if kind == "shard":
        name, axis = item
        meta["sharded"][name] = axis
    else:
        meta["syncs"].append(item)
