"""Patterns for `sch.find`: `Pattern`, `ModulePattern` and the `call_module` placeholder.

A pattern is a plain function or a `Pattern` module whose forward describes a chain of ops.
`call_module(regex, x)` (in a function) and `ModulePattern(regex)` (in a `Pattern`) stand for
"a call to any submodule whose name matches `regex`". Both only make sense while the pattern is
being traced by `find`; calling them on real tensors raises.
"""

from __future__ import annotations

from typing import Any

from torch import fx, nn


class Pattern(nn.Module):
    """Base class for module-style patterns: subclass it and write `forward`."""

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError


class ModulePattern(nn.Module):
    """A leaf matching any `call_module` node whose target matches the regex `name`."""

    traceable = False

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ModulePattern is only a placeholder inside sch.find(...)")


def call_module(mod_name: str, *args: Any, **kwargs: Any) -> Any:
    """Pattern placeholder for a call to a submodule whose name matches `mod_name` (a regex)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, fx.Proxy):
            # record ourselves as a call_function node; find() treats it as a module regex
            return value.tracer.create_proxy(
                "call_function", call_module, (mod_name, *args), kwargs
            )
    raise RuntimeError("call_module is only a placeholder inside sch.find(...)")


class PatternTracer(fx.Tracer):
    """Traces patterns: `ModulePattern`s and built-in modules stay leaves."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, ModulePattern) or super().is_leaf_module(m, module_qualified_name)


def trace_pattern(pattern: Any) -> tuple[fx.Graph, nn.Module]:
    """Trace a function or `Pattern` module; returns the graph and the module owning its leaves."""
    tracer = PatternTracer()
    graph = tracer.trace(pattern)
    return graph, tracer.root
