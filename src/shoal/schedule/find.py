"""`sch.find`: locating fx nodes and greedy subgraph matches.

`find(regex)` returns the `call_module` nodes whose target matches; `find(fn | Pattern)` traces
the pattern and matches its op nodes. The matcher is greedy like Slapo's: starting at each node
it takes, for every pattern op, the first equivalent node that fits, skipping unrelated nodes
in between; matched nodes are not reused. Equivalence identifies a functional op with its
module form (`F.relu` ~ `nn.ReLU`, `operator.add` ~ `torch.add`). Unlike Slapo, data edges
count: a matched node must consume the nodes matched for its pattern inputs (order-insensitive)
and every use of a pattern input must be the same graph node, so forking and joining (diamond)
patterns match, and unrelated ops that happen to lie in between are not picked up.
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
        matcher = _Matcher(pnodes, proot, nodes, gm)
        for start, first in enumerate(nodes):
            if first in matcher.used or not _equal(pnodes[0], proot, first, gm):
                continue
            match = matcher.match(start)
            if match is not None:
                matcher.used.update(match)
                results.append([(name, n) for n in match])
    return results


class _Matcher:
    """Backtracking matcher of a pattern's op nodes (in pattern order) against one graph.

    A pattern op with an already-matched input is looked for among that input's users, so
    forks and joins (one input feeding two ops whose results meet) match whatever order the
    graph lists the branches in; an op without matched inputs is looked for after the previous
    match, greedily, as in Slapo. Each pattern placeholder binds to one graph node, and every
    op using it must consume that node."""

    def __init__(
        self, pnodes: list[fx.Node], proot: nn.Module, nodes: list[fx.Node], gm: fx.GraphModule
    ) -> None:
        self.pnodes, self.proot, self.nodes, self.gm = pnodes, proot, nodes, gm
        self.index = {n: i for i, n in enumerate(nodes)}
        self.used: set[fx.Node] = set()

    def match(self, start: int) -> list[fx.Node] | None:
        first = self.nodes[start]
        binding = self._bind(self.pnodes[0], first, {}, {})
        if binding is None:
            return None
        mapping = {self.pnodes[0]: first}
        if not self._extend(1, mapping, binding, start):
            return None
        return [mapping[p] for p in self.pnodes]

    def _extend(self, i: int, mapping: dict, binding: dict, pos: int) -> bool:
        if i == len(self.pnodes):
            return True
        pnode = self.pnodes[i]
        for cand in self._candidates(pnode, mapping, binding, pos):
            if cand in self.used or cand in mapping.values():
                continue
            if not _equal(pnode, self.proot, cand, self.gm):
                continue
            new_binding = self._bind(pnode, cand, mapping, binding)
            if new_binding is None:
                continue
            mapping[pnode] = cand
            if self._extend(i + 1, mapping, new_binding, max(pos, self.index[cand])):
                return True
            del mapping[pnode]
        return False

    def _candidates(self, pnode: fx.Node, mapping: dict, binding: dict, pos: int) -> list:
        for pin in pnode.all_input_nodes:
            anchor = mapping.get(pin, binding.get(pin))
            if anchor is not None:  # follow the data edge
                users = [u for u in anchor.users if u in self.index]
                return sorted(users, key=self.index.__getitem__)
        return self.nodes[pos + 1 :]

    def _bind(self, pnode: fx.Node, cand: fx.Node, mapping: dict, binding: dict) -> dict | None:
        """Check `cand`'s inputs against `pnode`'s; returns the extended placeholder binding."""
        inputs = list(cand.all_input_nodes)
        pins = pnode.all_input_nodes
        free = [n for n in inputs if n not in mapping.values() and n not in binding.values()]
        binding = dict(binding)
        for k, pin in enumerate(pins):
            if pin in mapping:
                if mapping[pin] not in inputs:
                    return None
            elif pin in binding:
                if binding[pin] not in inputs:
                    return None
            elif pin.op == "placeholder":
                if not free:
                    continue  # the graph op has fewer inputs (e.g. a module with a constant)
                same_pos = inputs[k] if k < len(inputs) and inputs[k] in free else None
                binding[pin] = same_pos or free[0]
                free.remove(binding[pin])
        return binding


def find(sch: Schedule, node_pattern: Any) -> list:
    """`find(regex)` -> ``[(path, node)]``; `find(fn | Pattern)` -> ``[[(path, node), ...]]``."""
    if isinstance(node_pattern, str):
        regex = node_pattern
        return find_node(
            sch, lambda n: n.op == "call_module" and re.match(regex, n.target) is not None
        )
    return find_subgraph(sch, node_pattern)
