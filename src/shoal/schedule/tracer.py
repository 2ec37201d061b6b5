"""Tracing schedules into torch.fx graphs (`sch.trace`, `sch.trace_until`).

Without `flatten`, each child schedule is traced on its own and appears as a leaf
(`call_module`) in its parent's graph, so the module hierarchy and the schedule paths survive.
With `flatten`, children are inlined down to the leaves (built-in `torch.nn` modules, modules
marked ``traceable = False``, and `leaf_modules` entries). A failed trace warns and leaves the
module untouched, as in Slapo.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import fx, nn

from .errors import schedule_error
from .schedule import is_builtin_leaf

if TYPE_CHECKING:
    from .schedule import Schedule

_PLAIN = (int, float, bool, str, type(None), tuple)


class ScheduleTracer(fx.Tracer):
    """fx tracer with Slapo's leaf rules."""

    def __init__(self, leaf_modules: list[str] | None = None, leaf_ids: set[int] | None = None):
        super().__init__(param_shapes_constant=True)
        self.leaf_names = list(leaf_modules or [])
        self.leaf_ids = leaf_ids or set()

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if getattr(m, "traceable", True) is False or id(m) in self.leaf_ids:
            return True
        cls_name = type(m).__name__
        for entry in self.leaf_names:
            if entry in cls_name or module_qualified_name == entry:
                return True
        return super().is_leaf_module(m, module_qualified_name)


def _to_graph_module(mod: nn.Module, graph: fx.Graph) -> fx.GraphModule:
    gm = fx.GraphModule(mod, graph, class_name=type(mod).__name__)
    # keep config attributes (num_heads, hidden_size, a config object, ...) that schedules
    # read back; tensors and modules are what fx itself decides to keep
    for key, value in vars(mod).items():
        if key.startswith("_") or key == "training" or hasattr(gm, key):
            continue
        if isinstance(value, _PLAIN) or not (callable(value) or isinstance(value, torch.Tensor)):
            setattr(gm, key, value)
    return gm


def _check_tracer(tracer: str, path: str) -> None:
    if tracer == "huggingface":
        warnings.warn(
            "shoal.schedule: tracer='huggingface' uses the plain torch.fx tracer "
            "(transformers' HFTracer is not used); pass concrete_args for optional inputs",
            stacklevel=3,
        )
    elif tracer != "pytorch":
        raise schedule_error("trace", path, f"unknown tracer {tracer!r}; use 'pytorch'")


def trace_schedule(
    sch: Schedule,
    recursive: bool = True,
    flatten: bool = False,
    leaf_modules: list[str] | None = None,
    tracer: str = "pytorch",
    concrete_args: dict | None = None,
) -> bool:
    """Implementation of `Schedule.trace`; returns whether `sch.mod` is now a GraphModule."""
    _check_tracer(tracer, sch.path)
    if isinstance(sch.mod, fx.GraphModule):
        return True
    if is_builtin_leaf(sch.mod) or getattr(sch.mod, "traceable", True) is False:
        return False
    leaf_ids: set[int] = set()
    if not flatten:
        for child in list(sch.child.values()):
            if recursive and not is_builtin_leaf(child.mod):
                trace_schedule(child, True, False, leaf_modules, tracer, None)
            leaf_ids.add(id(child.mod))
    return _trace_into(sch, ScheduleTracer(leaf_modules, leaf_ids), concrete_args)


def _trace_into(sch: Schedule, tracer: ScheduleTracer, concrete_args: Any) -> bool:
    try:
        graph = tracer.trace(sch.mod, concrete_args=concrete_args)
    except Exception as exc:  # fx raises many types; Slapo's contract is "warn and go on"
        warnings.warn(
            f"shoal.schedule: cannot trace '{sch.path or '<root>'}' "
            f"({type(sch.mod).__name__}): {type(exc).__name__}: {exc}",
            stacklevel=3,
        )
        return False
    sch._replace_module(_to_graph_module(sch.mod, graph))
    return True


def trace_until(
    sch: Schedule,
    paths: str | list[str],
    tracer: str = "pytorch",
    concrete_args: dict | None = None,
    leaf_modules: list[str] | None = None,
) -> bool:
    """Flatten-trace the root; the children of each path in `paths` stay leaves."""
    if sch.parent is not None:
        raise schedule_error("trace_until", sch.path, "only the root schedule can be traced")
    _check_tracer(tracer, sch.path)
    if isinstance(sch.mod, fx.GraphModule):
        return True
    leaf_ids: set[int] = set()
    for path in [paths] if isinstance(paths, str) else list(paths):
        if path not in sch:  # a module list ("h") has no schedule of its own
            try:
                container = sch.get_module(path)
            except AttributeError:
                raise schedule_error("trace_until", path, "no such submodule") from None
            leaf_ids.update(id(m) for m in container.children())
            continue
        target = sch[path]
        leaf_ids.update(id(c.mod) for c in target.child.values())
        if not target.child:
            leaf_ids.add(id(target.mod))
    return _trace_into(sch, ScheduleTracer(leaf_modules, leaf_ids), concrete_args)
