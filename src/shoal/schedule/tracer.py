"""Tracing schedules into torch.fx graphs (`sch.trace`, `sch.trace_until`).

Without `flatten`, each child schedule is traced on its own and appears as a leaf
(`call_module`) in its parent's graph, so the module hierarchy and the schedule paths survive.
With `flatten`, children are inlined down to the leaves (built-in `torch.nn` modules, modules
marked ``traceable = False``, and `leaf_modules` entries). A failed trace warns and leaves the
module untouched, as in Slapo. `tracer="huggingface"` traces with transformers' own
`HFTracer` (the optional ``shoal[hf]`` extra), which feeds dummy inputs so that the models'
size-dependent control flow and mask construction trace; the schedule's leaf rules still apply.
"""

from __future__ import annotations

import functools
import inspect
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

    def is_explicit_leaf(self, m: nn.Module, module_qualified_name: str) -> bool:
        """The schedule's own leaves: untraceable, requested, or already compiled modules."""
        if getattr(m, "traceable", True) is False or id(m) in self.leaf_ids:
            return True
        if isinstance(m, torch.jit.ScriptModule):
            return True
        cls_name = type(m).__name__
        return any(e in cls_name or module_qualified_name == e for e in self.leaf_names)

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if self.is_explicit_leaf(m, module_qualified_name):
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
    if tracer not in ("pytorch", "huggingface"):
        raise schedule_error(
            "trace", path, f"unknown tracer {tracer!r}; use 'pytorch' or 'huggingface'"
        )
    if tracer == "huggingface":
        try:
            import transformers.utils.fx  # noqa: F401
        except ImportError:
            raise schedule_error(
                "trace(tracer='huggingface')", path, "needs transformers: pip install 'shoal[hf]'"
            ) from None


@functools.cache
def _hf_tracer_class() -> type:
    """`HFTracer` with the schedule's leaf rules (built lazily: transformers is optional)."""
    from transformers.utils.fx import HFTracer

    class ScheduleHFTracer(HFTracer):
        def __init__(self, leaf_modules: list[str] | None, leaf_ids: set[int]) -> None:
            super().__init__()
            self.rules = ScheduleTracer(leaf_modules, leaf_ids)

        def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
            # built-in leaves follow transformers' rule (a stateless module built from proxies
            # inside forward is traced through)
            if self.rules.is_explicit_leaf(m, module_qualified_name):
                return True
            return super().is_leaf_module(m, module_qualified_name)

    return ScheduleHFTracer


def _make_tracer(tracer: str, leaf_modules: list[str] | None, leaf_ids: set[int]) -> fx.Tracer:
    if tracer == "huggingface":
        return _hf_tracer_class()(leaf_modules, leaf_ids)
    return ScheduleTracer(leaf_modules, leaf_ids)


def _hf_trace_kwargs(sch: Schedule, concrete_args: dict | None, config: dict | None) -> dict:
    """Concrete arguments and dummy inputs for `HFTracer.trace`, as transformers' own
    `symbolic_trace` chooses them: the inputs are `config["input_names"]` (else the model's
    `dummy_inputs`, else the parameters without a default); every other parameter is fixed to
    its default. A submodule that is not a transformers model gets dummy inputs generated for the
    top model's config (hidden-size tensors for names like ``hidden_states``)."""
    mod, config = sch.mod, dict(config or {})
    sig = inspect.signature(mod.forward)
    names = config.get("input_names")
    if names is None and hasattr(mod, "dummy_inputs") and hasattr(mod, "config"):
        names = list(mod.dummy_inputs)
    if names is None:
        names = [p.name for p in sig.parameters.values() if p.default is inspect.Parameter.empty]
    fixed = {p.name: p.default for p in sig.parameters.values() if p.name not in names}
    fixed.update(concrete_args or {})
    model_cfg = getattr(mod, "config", None)
    if model_cfg is not None and "past_key_values" not in names:
        model_cfg.use_cache = False  # as symbolic_trace does: no cache outputs in the graph
    dummies = config.get("dummy_inputs")
    if dummies is None and not hasattr(mod, "dummy_inputs"):
        top = sch.get_top_schedule().mod
        tracer = _hf_tracer_class()(None, set())
        dummies = {}
        for name in names:
            dummies.update(tracer._generate_dummy_input(top, name, [2, 8], input_names=names))
    return {"concrete_args": fixed, "dummy_inputs": dummies}


def trace_schedule(
    sch: Schedule,
    recursive: bool = True,
    flatten: bool = False,
    leaf_modules: list[str] | None = None,
    tracer: str = "pytorch",
    concrete_args: dict | None = None,
    config: dict | None = None,
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
    return _trace_into(sch, tracer, leaf_modules, leaf_ids, concrete_args, config)


def _trace_into(
    sch: Schedule,
    tracer: str,
    leaf_modules: list[str] | None,
    leaf_ids: set[int],
    concrete_args: Any,
    config: dict | None = None,
) -> bool:
    try:
        impl = _make_tracer(tracer, leaf_modules, leaf_ids)
        if tracer == "huggingface":
            graph = impl.trace(sch.mod, **_hf_trace_kwargs(sch, concrete_args, config))
            if sch.parent is not None:
                _restore_signature(graph, sch.mod)
        else:
            graph = impl.trace(sch.mod, concrete_args=concrete_args)
    except Exception as exc:  # fx raises many types; Slapo's contract is "warn and go on"
        warnings.warn(
            f"shoal.schedule: cannot trace '{sch.path or '<root>'}' "
            f"({type(sch.mod).__name__}): {type(exc).__name__}: {exc}",
            stacklevel=3,
        )
        return False
    sch._replace_module(_to_graph_module(sch.mod, graph))
    return True


def _restore_signature(graph: fx.Graph, mod: nn.Module) -> None:
    """Put back the parameters `HFTracer` drops for fixed (concrete) arguments.

    A traced child is still called by its parent with every keyword it had (``layer_past=None``,
    ...), so its graph keeps them as placeholders with their default values, in signature order;
    as with fx's own concrete arguments, their values are fixed at trace time."""
    present = {n.target: n for n in graph.nodes if n.op == "placeholder"}
    anchor = next(n for n in graph.nodes if n.op != "placeholder")
    for param in inspect.signature(mod.forward).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        node = present.get(param.name)
        if node is None:
            with graph.inserting_before(anchor):
                node = graph.placeholder(param.name, default_value=param.default)
        anchor.prepend(node)


def trace_until(
    sch: Schedule,
    paths: str | list[str],
    tracer: str = "pytorch",
    concrete_args: dict | None = None,
    leaf_modules: list[str] | None = None,
    config: dict | None = None,
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
    return _trace_into(sch, tracer, leaf_modules, leaf_ids, concrete_args, config)
