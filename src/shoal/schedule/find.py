"""`sch.find`: locating fx nodes and greedy subgraph matches.

`find(regex)` returns the `call_module` nodes whose target matches; `find(fn | Pattern)` traces
the pattern and matches its op nodes in order. The matcher is greedy like Slapo's: starting at
each node it takes, for every pattern op, the first later node that is equivalent, skipping
unrelated nodes in between; matched nodes are not reused. Equivalence identifies a functional op
with its module form (`F.relu` ~ `nn.ReLU`, `operator.add` ~ `torch.add`). Unlike Slapo, a
matched node must consume the nodes matched for its pattern inputs (order-insensitive), so
unrelated ops that happen to lie in between are not picked up.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from .pattern import ModulePattern, call_module, trace_pattern

if TYPE_CHECKING:
    from .schedule import Schedule

Match = list[tuple[str, fx.Node]]

_EQUIV: dict[str, tuple[Any, ...]] = {
    "relu": (F.relu, torch.relu, nn.ReLU),
    "gelu": (F.gelu, nn.GELU),
    "silu": (F.silu, nn.SiLU),
    "tanh": (torch.tanh, F.tanh, nn.Tanh),
    "sigmoid": (torch.sigmoid, F.sigmoid, nn.Sigmoid),
    "softmax": (F.softmax, torch.softmax, nn.Softmax),
    "dropout": (F.dropout, nn.Dropout),
    "layer_norm": (F.layer_norm, nn.LayerNorm),
    "linear": (F.linear, nn.Linear),
    "embedding": (F.embedding, nn.Embedding),
    "conv2d": (F.conv2d, nn.Conv2d),
    "add": (operator.add, torch.add),
    "sub": (operator.sub, torch.sub),
    "mul": (operator.mul, torch.mul),
    "truediv": (operator.truediv, torch.div),
    "matmul": (operator.matmul, torch.matmul),
}
_METHOD_ALIAS = {"div": "truediv"}
_CANON: dict[Any, str] = {obj: key for key, objs in _EQUIV.items() for obj in objs}


def _key(node: fx.Node, root: nn.Module) -> Any:
    """A canonical identity for an op node (function, method or module call)."""
    if node.op == "call_function":
        return _CANON.get(node.target, node.target)
    if node.op == "call_method":
        return _METHOD_ALIAS.get(node.target, node.target)
    if node.op == "call_module":
        mod = root.get_submodule(node.target)
        return _CANON.get(type(mod), type(mod))
    return (node.op, node.target)


def _equal(pnode: fx.Node, proot: nn.Module, node: fx.Node, root: nn.Module) -> bool:
    if pnode.op == "call_function" and pnode.target is call_module:
        return node.op == "call_module" and re.match(pnode.args[0], node.target) is not None
    if pnode.op == "call_module":
        pmod = proot.get_submodule(pnode.target)
        if isinstance(pmod, ModulePattern):
            return node.op == "call_module" and re.match(pmod.name, node.target) is not None
    if node.op not in ("call_function", "call_method", "call_module"):
        return False
    return _key(pnode, proot) == _key(node, root)


def _graph_modules(sch: Schedule) -> list[tuple[str, fx.GraphModule]]:
    if not isinstance(sch.mod, fx.GraphModule):
        sch.trace()
    return [(n, m) for n, m in sch.mod.named_modules() if isinstance(m, fx.GraphModule)]


def find_node(sch: Schedule, fn: Callable[[fx.Node], bool]) -> list[tuple[str, fx.Node]]:
    """All nodes of the subtree's graphs satisfying `fn`, as ``(graph_module_path, node)``."""
    return [(name, n) for name, gm in _graph_modules(sch) for n in gm.graph.nodes if fn(n)]


def find_subgraph(sch: Schedule, pattern: Any) -> list[Match]:
    """Greedy, non-overlapping matches of `pattern` in every graph of the subtree."""
    pgraph, proot = trace_pattern(pattern)
    pnodes = [n for n in pgraph.nodes if n.op in ("call_function", "call_method", "call_module")]
    if not pnodes:
        return []
    results: list[Match] = []
    for name, gm in _graph_modules(sch):
        nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
        used: set[fx.Node] = set()
        for start, first in enumerate(nodes):
            if first in used or not _equal(pnodes[0], proot, first, gm):
                continue
            match = _extend({pnodes[0]: first}, pnodes, proot, nodes, start, gm, used)
            if match is not None:
                used.update(match)
                results.append([(name, n) for n in match])
    return results


def _extend(
    mapping: dict[fx.Node, fx.Node],
    pnodes: list[fx.Node],
    proot: nn.Module,
    nodes: list[fx.Node],
    start: int,
    gm: fx.GraphModule,
    used: set[fx.Node],
) -> list[fx.Node] | None:
    pos = start
    for pnode in pnodes[1:]:
        for k in range(pos + 1, len(nodes)):
            cand = nodes[k]
            if cand in used or cand in mapping.values() or not _equal(pnode, proot, cand, gm):
                continue
            inputs = set(cand.all_input_nodes)
            if all(mapping[p] in inputs for p in pnode.all_input_nodes if p in mapping):
                mapping[pnode] = cand
                pos = k
                break
        else:
            return None
    return [mapping[p] for p in pnodes]


def find(sch: Schedule, node_pattern: Any) -> list:
    """`find(regex)` -> ``[(path, node)]``; `find(fn | Pattern)` -> ``[[(path, node), ...]]``."""
    if isinstance(node_pattern, str):
        regex = node_pattern
        return find_node(
            sch, lambda n: n.op == "call_module" and re.match(regex, n.target) is not None
        )
    return find_subgraph(sch, node_pattern)
