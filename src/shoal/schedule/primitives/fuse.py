"""`sch.fuse(subgraph, compiler="TorchScript", name="FusedModule")`: compile a subgraph.

The (single, >= 2 node) subgraph is extracted into a GraphModule, compiled, and replaced
vertically by a child ``f"{name}_<k>"``. Compilers: ``"TorchScript"`` (`torch.jit.script`; the
child is the `torch.jit.ScriptModule`),
``"inductor"`` / ``"TorchInductor"`` (`torch.compile(backend="inductor")`), any other
`torch.compile` backend name (e.g. ``"aot_eager"``), or ``None`` (no compilation: a module
named `name` that runs the subgraph; a chain of modules becomes an `nn.Sequential`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx, nn

from ..errors import schedule_error
from ..graph_edit import _ordered, extract_subgraph, normalize_matches, vertical_replace
from .base import Primitive, register_primitive


class _Compiled(nn.Module):
    """Holds the compiled callable; an fx leaf so later traces do not look inside."""

    traceable = False

    def __init__(self, gm: fx.GraphModule, compiled: Any) -> None:
        super().__init__()
        self.gm = gm
        self.compiled = compiled

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)


def _chain_of_modules(gm: fx.GraphModule, nodes: list[fx.Node]) -> bool:
    if not all(n.op == "call_module" for n in nodes):
        return False
    return all(
        n.args == (prev,) and not n.kwargs for prev, n in zip(nodes, nodes[1:], strict=False)
    )


def compile_subgraph(gm: fx.GraphModule, nodes: list[fx.Node], compiler: str | None, name: str):
    sub = extract_subgraph(gm, nodes)
    if compiler is None:
        if _chain_of_modules(gm, nodes) and len(sub.graph.find_nodes(op="placeholder")) == 1:
            cls = type(name, (nn.Sequential,), {})
            return cls(*[gm.get_submodule(n.target) for n in nodes])
        return type(name, (_Compiled,), {})(sub, sub)
    if compiler == "TorchScript":
        # as in Slapo, the schedule holds the ScriptModule itself (its `original_name` is `name`)
        return torch.jit.script(fx.GraphModule(sub, sub.graph, class_name=name))
    backend = "inductor" if compiler in ("inductor", "TorchInductor") else compiler
    return type(name, (_Compiled,), {})(sub, torch.compile(sub, backend=backend))


@register_primitive()
class FusePrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "fuse"

    @staticmethod
    def apply(
        sch: Any, subgraph: Any, compiler: str | None = "TorchScript", name: str = "FusedModule"
    ) -> nn.Module:
        matches = normalize_matches(subgraph, "fuse", sch.path)
        if len(matches) != 1 or len(matches[0]) < 2:
            raise schedule_error("fuse", sch.path, "needs one subgraph of at least 2 nodes")
        gm = sch.get_module(matches[0][0][0])
        nodes = _ordered(gm, [n for _, n in matches[0]])
        try:
            fused = compile_subgraph(gm, nodes, compiler, name)
        except Exception as exc:
            raise schedule_error(f"fuse(compiler={compiler!r})", sch.path, str(exc)) from exc
        vertical_replace(sch, matches[0], fused, name=name, primitive="fuse")
        return fused
