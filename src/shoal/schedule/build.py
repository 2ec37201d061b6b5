"""`build(sch, target=None | "pipeline")`, weight consolidation and `init_empty_weights`.

`init_empty_weights()` creates parameters on the meta device so a huge model can be scheduled
(sharded) before it exists. `build` then materializes such parameters (`consolidate_model`):
each module gets full-size tensors on the target device, is initialized on the group's first
rank (with the user's `init_weights` function or the module's `reset_parameters`), the values
are broadcast and re-split along the recorded shard axis, so every layout starts from the same
full model. The device defaults to the model's own (CPU when everything is on meta).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from .errors import schedule_error
from .sharding import collectives

if TYPE_CHECKING:
    from .schedule import Schedule


@contextlib.contextmanager
def init_empty_weights(enable: bool = True, include_buffers: bool = False) -> Iterator[None]:
    """Within the block, new parameters (and buffers, if asked) are created on `meta`."""
    if not enable:
        yield
        return
    orig_param, orig_buffer = nn.Module.register_parameter, nn.Module.register_buffer

    def register_parameter(self: nn.Module, name: str, param: Any) -> None:
        orig_param(self, name, param)
        if param is not None and not param.is_meta:  # already-meta (tied) params stay shared
            cls, attrs = type(param), vars(param)
            meta = cls(param.to("meta"), requires_grad=param.requires_grad)
            meta.__dict__.update(attrs)
            self._parameters[name] = meta

    def register_buffer(self: nn.Module, name: str, tensor: Any, persistent: bool = True) -> None:
        orig_buffer(self, name, tensor, persistent)
        if tensor is not None:
            self._buffers[name] = tensor.to("meta")

    nn.Module.register_parameter = register_parameter
    if include_buffers:
        nn.Module.register_buffer = register_buffer
    try:
        yield
    finally:
        nn.Module.register_parameter = orig_param
        nn.Module.register_buffer = orig_buffer


def _model_device(mod: nn.Module) -> torch.device:
    for tensor in [*mod.parameters(), *mod.buffers()]:
        if not tensor.is_meta:
            return tensor.device
    return torch.device("cpu")


def _run_init(init_weights: Any, mod: nn.Module, path: str) -> None:
    if callable(init_weights):
        nargs = len(inspect.signature(init_weights).parameters)
        init_weights(mod, path) if nargs >= 2 else init_weights(mod)
    elif hasattr(mod, "reset_parameters"):
        mod.reset_parameters()


def consolidate_model(
    sch: Schedule, init_weights: bool | Callable = True, device: Any = None
) -> nn.Module:
    """Materialize meta parameters: full init on rank 0 of the group, broadcast, re-split."""
    model = sch.mod
    device = torch.device(device) if device is not None else _model_device(model)
    group = sch.group
    distributed = dist.is_available() and dist.is_initialized() and sch.world_size > 1
    done: dict[int, torch.Tensor] = {}  # meta tensor id -> materialized (keeps ties tied)
    for path, mod in model.named_modules():
        local = {
            k: v
            for k, v in [*mod._parameters.items(), *mod._buffers.items()]
            if v is not None and v.is_meta
        }
        for key in [k for k, v in local.items() if id(v) in done]:
            table = mod._parameters if key in mod._parameters else mod._buffers
            table[key] = done[id(local.pop(key))]
        if not local:
            continue
        sharded = {}
        for key, tensor in local.items():
            shape = getattr(tensor, "orig_shape", tuple(tensor.shape))
            full = torch.zeros(shape, dtype=tensor.dtype, device=device)
            if key in mod._parameters:
                param = nn.Parameter(full, requires_grad=tensor.requires_grad)
                param.__dict__.update(vars(tensor))
                mod._parameters[key] = param
            else:
                mod._buffers[key] = full
            if getattr(tensor, "shard_axis", None) is not None:
                sharded[key] = tensor.shard_axis
        with torch.no_grad():
            if init_weights:
                _run_init(init_weights, mod, path)
            for key in local:
                full = getattr(mod, key)
                if distributed:
                    dist.broadcast(full.data, src=collectives.first_rank(group), group=group)
                if key in sharded:
                    axis, ws = sharded[key], sch.world_size
                    chunk = full.data.chunk(ws, dim=axis)[sch.rank].clone()
                    full.data = chunk
                done[id(local[key])] = full
    return model


def build(
    sch: Schedule, target: str | None = None, init_weights: bool | Callable = True, **kwargs: Any
) -> tuple[nn.Module, Any]:
    """Finish the schedule: ``(model, None)``; with ``target="pipeline"`` this rank's stage.

    Pipeline keywords: `num_microbatches`, `schedule` ("gpipe" or "1f1b"), `loss_fn`,
    `group`, `device`. Unknown targets (e.g. "deepspeed") raise a `ScheduleError`.
    """
    if any(t.is_meta for t in [*sch.mod.parameters(), *sch.mod.buffers()]):
        consolidate_model(sch, init_weights, kwargs.get("device"))
    if sch.backend == "dtensor":
        from .sharding.dtensor import apply_dtensor_plans

        apply_dtensor_plans(sch)
    if target is None:
        return sch.mod, None
    from .framework_dialect import get_dialect_cls

    engine = get_dialect_cls("pipeline_engine", target, allow_none=True)
    if engine is None:
        raise schedule_error(
            f"build(target={target!r})", sch.path, "targets are None or 'pipeline'"
        )
    keys = ("num_microbatches", "schedule", "loss_fn", "group", "device")
    return engine(sch, **{k: v for k, v in kwargs.items() if k in keys}), None
