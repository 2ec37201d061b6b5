"""fx graph surgery shared by `replace`, `checkpoint` and `fuse`.

A match (from `find`) is a list of ``(graph_module_path, node)``. Vertical replacement swaps one
matched subgraph for a single call whose arguments are the subgraph's external inputs (in
first-use order); horizontal replacement swaps several matches for one call fed with the first
match's arguments, whose i-th output (``getitem``) stands for the i-th match. New submodules are
named ``f"{name}_{k}"`` with the smallest free `k`. Hooks follow Slapo's rules: the first node's
pre-forward/backward hooks and the last node's forward hooks move to the new module; hooks on
middle nodes, or any hook in a horizontal replacement, are an error.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import fx, nn

from .errors import ScheduleError, schedule_error
from .hooks import has_hooks, transfer_hooks

if TYPE_CHECKING:
    from .schedule import Schedule

Match = list[tuple[str, fx.Node]]


def normalize_matches(target_ops: Any, primitive: str, path: str) -> list[Match]:
    """Accept a node tuple, a list of node tuples or a list of subgraphs; return subgraphs."""
    if (
        isinstance(target_ops, tuple)
        and len(target_ops) == 2
        and isinstance(target_ops[1], fx.Node)
    ):
        return [[target_ops]]
    ops = list(target_ops)
    if not ops:
        raise schedule_error(primitive, path, "no target ops given (did find() match nothing?)")
    if all(isinstance(op, tuple) for op in ops):
        # a flat list of nodes is one subgraph if its nodes feed each other (a find(pattern)
        # match), and parallel single-node targets if they are independent (find(regex))
        nodes = {n for _, n in ops}
        if any(set(n.all_input_nodes) & nodes for _, n in ops):
            return [ops]
        return [[op] for op in ops]
    if all(isinstance(op, list) and op for op in ops):
        return ops
    raise schedule_error(primitive, path, f"cannot interpret target ops {target_ops!r}")


def _owner_gm(sch: Schedule, match: Match, primitive: str) -> fx.GraphModule:
    parents = {p for p, _ in match}
    if len(parents) != 1:
        raise schedule_error(primitive, sch.path, f"subgraph spans several modules {parents}")
    gm = sch.get_module(parents.pop())
    if not isinstance(gm, fx.GraphModule):
        raise schedule_error(primitive, sch.path, "target nodes are not in a traced module")
    return gm


def _ordered(gm: fx.GraphModule, nodes: list[fx.Node]) -> list[fx.Node]:
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    return sorted(nodes, key=lambda n: order[n])


def external_inputs(nodes: list[fx.Node]) -> list[fx.Node]:
    """Nodes feeding the subgraph from outside, in first-use order."""
    inside, seen = set(nodes), []
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in inside and arg not in seen:
                seen.append(arg)
    return seen


def extract_subgraph(gm: fx.GraphModule, nodes: list[fx.Node]) -> fx.GraphModule:
    """A standalone GraphModule computing the (ordered) `nodes`; it shares their submodules."""
    graph, env = fx.Graph(), {}
    for inp in external_inputs(nodes):
        env[inp] = graph.placeholder(inp.name)
    for node in nodes:
        env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(env[nodes[-1]])
    return fx.GraphModule(gm, graph, class_name="Subgraph")


def check_arity(fn: Callable, num_inputs: int, primitive: str, path: str) -> None:
    """`fn` must accept exactly `num_inputs` arguments (its required ones at least)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: nothing to check
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    if num_inputs < len(required) or (not variadic and num_inputs > len(positional)):
        owner = getattr(fn, "__qualname__", repr(fn))
        raise schedule_error(
            primitive,
            path,
            f"{owner} takes {len(required)} required argument(s) "
            f"({len(positional)} positional) but the subgraph provides {num_inputs}",
        )


def unique_name(gm: nn.Module, base: str) -> str:
    k = 0
    while hasattr(gm, f"{base}_{k}"):
        k += 1
    return f"{base}_{k}"


def _module_of(gm: fx.GraphModule, node: fx.Node) -> nn.Module | None:
    return gm.get_submodule(node.target) if node.op == "call_module" else None


def _move_hooks(gm: fx.GraphModule, nodes: list[fx.Node], new: Any, primitive: str, path: str):
    mods = [_module_of(gm, n) for n in nodes]
    for mod in mods[1:-1]:
        if mod is not None and has_hooks(mod):
            raise schedule_error(primitive, path, "a middle node of the subgraph has hooks")
    first, last = mods[0], mods[-1]
    pre = first is not None and has_hooks(first, ("fwd_pre", "bwd_post", "bwd_pre"))
    post = last is not None and has_hooks(last, ("fwd_post",))
    if (pre or post) and not isinstance(new, nn.Module):
        raise schedule_error(primitive, path, "hooks cannot move to a function; use a module")
    if pre:
        transfer_hooks(first, new, ("fwd_pre", "bwd_post", "bwd_pre"))
    if post:
        transfer_hooks(last, new, ("fwd_post",))


def finalize(sch: Schedule, gm: fx.GraphModule) -> None:
    """DCE, drop unused submodules, recompile and refresh the owning schedule's children."""
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.graph.lint()
    gm.recompile()
    owner = sch.get_top_schedule().owner_of(gm)
    (owner or sch)._refresh_children()


def vertical_replace(
    sch: Schedule,
    match: Match,
    new: Any,
    name: str | None = None,
    concrete_args: dict | None = None,
    primitive: str = "replace",
) -> fx.Node:
    """Replace one matched subgraph by a call to `new` (module or function)."""
    gm = _owner_gm(sch, match, primitive)
    nodes = _ordered(gm, [n for _, n in match])
    inside = set(nodes)
    for node in nodes[:-1]:
        if any(user not in inside for user in node.users):
            raise schedule_error(
                primitive, sch.path, f"node '{node.name}' is used outside the subgraph"
            )
    single = len(nodes) == 1
    last = nodes[-1]
    args, kwargs = (last.args, dict(last.kwargs)) if single else (tuple(external_inputs(nodes)), {})
    kwargs.update(concrete_args or {})
    fn = new.forward if isinstance(new, nn.Module) else new
    check_arity(fn, len(args) + len(kwargs), primitive, sch.path)
    _move_hooks(gm, nodes, new, primitive, sch.path)
    with gm.graph.inserting_after(last):
        if isinstance(new, nn.Module):
            attr = unique_name(gm, name or type(new).__name__)
            gm.add_submodule(attr, new)
            new_node = gm.graph.call_module(attr, args, kwargs)
        else:
            new_node = gm.graph.call_function(new, args, kwargs)
    last.replace_all_uses_with(new_node)
    for node in reversed(nodes):
        gm.graph.erase_node(node)
    finalize(sch, gm)
    return new_node


def horizontal_replace(
    sch: Schedule, matches: list[Match], new: nn.Module, name: str | None = None
) -> fx.Node:
    """Replace several parallel matches by one call; output i stands for match i."""
    primitive = "replace"
    gm = _owner_gm(sch, [op for m in matches for op in m], primitive)
    groups = [_ordered(gm, [n for _, n in m]) for m in matches]
    for group in groups:
        for node in group:
            mod = _module_of(gm, node)
            if mod is not None and has_hooks(mod):
                raise ScheduleError(
                    f"{primitive} on '{sch.path or '<root>'}': horizontal replacement cannot "
                    f"move the hooks of '{node.target}'"
                )
    first = groups[0][0]
    check_arity(new.forward, len(first.args) + len(first.kwargs), primitive, sch.path)
    attr = unique_name(gm, name or type(new).__name__)
    gm.add_submodule(attr, new)
    with gm.graph.inserting_before(_ordered(gm, [g[0] for g in groups])[0]):
        new_node = gm.graph.call_module(attr, first.args, dict(first.kwargs))
        outs = [gm.graph.call_function(operator.getitem, (new_node, i)) for i in range(len(groups))]
    for group, out in zip(groups, outs, strict=True):
        group[-1].replace_all_uses_with(out)
    for group in groups:
        for node in reversed(group):
            if not node.users:
                gm.graph.erase_node(node)
    finalize(sch, gm)
    return new_node
