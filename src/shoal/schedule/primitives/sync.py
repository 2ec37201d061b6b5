"""`sch.sync(mode, sync_op_or_fn, **kwargs)`: insert a collective at a module boundary.

`mode` is ``"fwd_pre"`` (on the first input), ``"fwd_post"`` (on the output) or ``"bwd_post"``
(on the input gradient: implemented as a forward-pre hook whose backward all-reduces, Megatron's
"f"). String ops are the conjugate autograd collectives of `sharding.sync_ops`; reshard strings
("RS->SR", ...) go through `sharding.reshard_ops`; a callable is registered as the matching
module hook (`bwd_post` as a full backward hook). A row-parallel `nn.Linear` with a bias gets a
`LinearWithSyncFunc` so that its bias is added after the reduction, once; a row-parallel HF
`Conv1D` or `nn.Conv*d` takes its bias out before the collective and adds it once after. The op
is checked against the module's sharding before anything is registered, and a module takes one
string op per mode (a second one is refused; callables may be stacked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import schedule_error
from ..op.linear import LinearWithSyncFunc
from ..sharding import sync_ops as S
from ..sharding.dtensor import record
from ..sharding.reshard_ops import is_reshard_string, reshard_fn
from ..sharding.shard_ops import PARTIAL, partial_bias, validate_sync
from .base import Primitive, register_primitive

MODES = ("fwd_pre", "fwd_post", "bwd_post")
_AXIS_OPS = ("all_gather", "reduce_scatter", "scatter")


def _on_first(fn: Callable, value: Any) -> Any:
    if isinstance(value, tuple):
        return (fn(value[0]), *value[1:])
    return fn(value)


@register_primitive()
class SyncPrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "sync"

    @staticmethod
    def init_metadata() -> list:
        return []

    @staticmethod
    def is_verifiable() -> bool:
        return True

    @staticmethod
    def apply(sch: Any, mode: str, sync_op_or_fn: str | Callable, **kwargs: Any) -> None:
        prim = f"sync({mode!r}, {getattr(sync_op_or_fn, '__name__', sync_op_or_fn)!r})"
        if mode not in MODES:
            raise schedule_error(prim, sch.path, f"mode must be one of {MODES}")
        if isinstance(sync_op_or_fn, str):
            _check_first_in_mode(sch, prim, mode)
        _apply(sch, prim, mode, sync_op_or_fn, kwargs)
        # recorded once applied, so a refused sync does not block a corrected retry
        sch.metadata.primitives.setdefault("sync", []).append((mode, sync_op_or_fn, kwargs))


def _check_first_in_mode(sch: Any, prim: str, mode: str) -> None:
    """One string sync per mode and module: a second one would act on the first one's result
    (an all-reduce applied twice sums world_size copies), which the sharding validation cannot
    check. Callables are user hooks and may be stacked. A module reachable by two paths has a
    schedule node on each; their syncs all land on the one module."""
    nodes = [node for _, node in sch.get_top_schedule().named_schedules() if node.mod is sch.mod]
    for node in [*nodes, sch] if sch not in nodes else nodes:
        for done_mode, op, _ in node.metadata.primitives.get("sync") or []:
            if done_mode == mode and isinstance(op, str):
                raise schedule_error(
                    prim,
                    sch.path,
                    f"the module already has a {mode!r} sync ({op!r}); "
                    "a second one would apply the collective again",
                )


def _apply(sch: Any, prim: str, mode: str, sync_op_or_fn: str | Callable, kwargs: dict) -> None:
    if sch.backend == "dtensor" and isinstance(sync_op_or_fn, str):
        record(sch, "sync", (mode, sync_op_or_fn, kwargs))
        return
    mod = sch.mod
    if callable(sync_op_or_fn):
        if mode == "fwd_pre":
            mod.register_forward_pre_hook(sync_op_or_fn)
        elif mode == "fwd_post":
            mod.register_forward_hook(sync_op_or_fn)
        else:
            mod.register_full_backward_hook(sync_op_or_fn)
        return
    if is_reshard_string(sync_op_or_fn):
        if mode == "bwd_post":
            raise schedule_error(prim, sch.path, "reshard strings apply to fwd_pre/fwd_post")
        try:
            fn = reshard_fn(sync_op_or_fn, sch.group)
        except ValueError as exc:
            raise schedule_error(prim, sch.path, str(exc)) from None
        _register(mod, mode, fn)
        return
    _apply_collective(sch, prim, mode, sync_op_or_fn, kwargs)


def _apply_collective(sch: Any, prim: str, mode: str, op: str, kwargs: dict) -> None:
    group, axis = sch.group, kwargs.get("axis")
    if op in _AXIS_OPS and axis is None:
        raise schedule_error(prim, sch.path, f"{op} needs axis=<output dimension>")
    info = sch.metadata.primitives.get("shard") or {}
    reason = validate_sync(sch.mod, info, mode, op, axis)
    if reason is not None:
        raise schedule_error(prim, sch.path, reason)
    tp_grad = kwargs.get("tensor_parallel_output_grad", True)
    table: dict[tuple[str, str], Callable[[torch.Tensor], torch.Tensor]] = {
        ("fwd_post", "all_reduce"): lambda t: S.reduce_forward_output(t, group),
        ("fwd_post", "all_gather"): lambda t: S.all_gather_forward_output(t, axis, group, tp_grad),
        ("fwd_post", "reduce_scatter"): lambda t: S.reduce_scatter_forward_output(t, axis, group),
        ("fwd_post", "scatter"): lambda t: S.scatter_forward_output(t, axis, group),
        ("fwd_pre", "all_gather"): lambda t: S.all_gather_forward_output(t, axis, group, tp_grad),
        ("fwd_pre", "scatter"): lambda t: S.scatter_forward_output(t, axis, group),
        ("bwd_post", "all_reduce"): lambda t: S.reduce_backward_grad(t, group),
    }
    fn = table.get((mode, op))
    if fn is None:
        ops = sorted(o for m, o in table if m == mode)
        raise schedule_error(prim, sch.path, f"unknown op {op!r} for {mode}; known: {ops}")
    if info.get("gather_axis") == -1 and (mode, op) == ("fwd_post", "all_gather"):
        fn = _check_last_axis(fn, axis, prim, sch.path)
    mod = sch.mod
    if mode == "fwd_post" and info.get("output_type") == PARTIAL and partial_bias(mod) is not None:
        # the replicated bias must be added once, after the sum, not once per rank
        if isinstance(mod, nn.Linear):
            if not isinstance(mod, LinearWithSyncFunc):
                sch.replace(LinearWithSyncFunc.from_linear(mod, fn))
            else:
                mod.sync_fn = fn
            return
        fn = _bias_once(fn, mod)
    _register(mod, "fwd_pre" if mode == "bwd_post" else mode, fn)


def _bias_once(fn: Callable, mod: nn.Module) -> Callable:
    """A row-parallel HF `Conv1D` or `nn.Conv*d` adds its (replicated) bias on every rank before
    the sum; take it out before the collective and add it once after (what `LinearWithSyncFunc`
    does for `nn.Linear`). The bias is read at call time: `build` may re-create it."""

    def once(t: torch.Tensor) -> torch.Tensor:
        bias = partial_bias(mod)
        return fn(t - bias) + bias

    return once


def _check_last_axis(fn: Callable, axis: int, prim: str, path: str) -> Callable:
    def checked(t: torch.Tensor) -> torch.Tensor:
        if axis % t.dim() != t.dim() - 1:
            raise schedule_error(prim, path, f"output is partitioned on its last axis, not {axis}")
        return fn(t)

    return checked


def _sync_first_input(fn: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Apply `fn` to the first positional input, or to the first keyword input if none."""
    if args:
        return (fn(args[0]), *args[1:]), kwargs
    if kwargs:
        key = next(iter(kwargs))
        return args, {**kwargs, key: fn(kwargs[key])}
    raise RuntimeError("sync(fwd_pre/bwd_post): the module was called without inputs")


def _register(mod: nn.Module, mode: str, fn: Callable) -> None:
    if mode == "fwd_pre":
        mod.register_forward_pre_hook(
            lambda _m, args, kwargs: _sync_first_input(fn, tuple(args), kwargs), with_kwargs=True
        )
    else:
        mod.register_forward_hook(lambda _m, _inputs, output: _on_first(fn, output))
