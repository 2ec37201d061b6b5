"""The schedule tree: one `Schedule` per submodule, mirroring the model's module hierarchy.

`create_schedule(model)` wraps a model; `sch["a.b.0"]` walks to a submodule's schedule, and every
registered primitive is available as a method (`sch["fc1"].shard("weight", 0)`). Module lists are
flattened into their parent (`"layers.0"` is a direct child), `nn.Sequential` stays a normal
child, and built-in `torch.nn` modules are leaves. Tracing and pattern search are delegated to
`tracer` and `find`; the primitives themselves live in `primitives/`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import fx, nn

from .checkpoint import CheckPointWrapper
from .errors import SchedulePathError
from .hooks import transfer_hooks
from .primitives.base import PRIMITIVES
from .swap import swap_everywhere


@dataclass
class ScheduleMetadata:
    """Per-schedule bookkeeping: tied parameters, parameter tags and primitive state."""

    tie_weights: dict = field(default_factory=dict)
    param_tags: set = field(default_factory=set)
    primitives: dict = field(default_factory=dict)


def is_builtin_leaf(mod: nn.Module) -> bool:
    """Built-in `torch.nn` modules (except containers) have no schedule children."""
    if type(mod) is nn.Module or isinstance(mod, nn.Sequential | nn.ModuleList | nn.ModuleDict):
        return False
    if isinstance(mod, torch.jit.ScriptModule):  # compiled (fuse): nothing to schedule inside
        return True
    module = type(mod).__module__
    return module.startswith("torch.nn") or module.startswith("torch.ao.nn")


def _is_list_like(mod: nn.Module) -> bool:
    """ModuleLists, and the plain containers fx makes for them, are flattened into the parent."""
    if isinstance(mod, nn.ModuleList):
        return True
    names = [n for n, _ in mod.named_children()]
    return type(mod) is nn.Module and bool(names) and all(n.isdigit() for n in names)


def set_submodule(root: nn.Module, dotted: str, new: nn.Module) -> None:
    """`setattr` through a dotted path (works for ModuleList/Sequential items too)."""
    owner_path, _, attr = dotted.rpartition(".")
    owner = root.get_submodule(owner_path) if owner_path else root
    setattr(owner, attr, new)


class Schedule:
    """A node of the schedule tree; see the module docstring."""

    def __init__(
        self,
        mod: nn.Module,
        name: str = "",
        path: str = "",
        parent: Schedule | None = None,
        group: Any = None,
        backend: str = "native",
    ) -> None:
        if backend not in ("native", "dtensor"):
            raise ValueError(
                f"create_schedule: backend must be 'native' or 'dtensor', not {backend!r}"
            )
        self.mod = mod
        self.backend = parent.backend if parent is not None else backend
        self.name = name
        self.path = path
        self.parent = parent
        self.group = group
        if dist.is_available() and dist.is_initialized():
            self.world_size = dist.get_world_size(group)
            self.rank = dist.get_rank(group)
        else:
            self.world_size, self.rank = 1, 0
        self.metadata = ScheduleMetadata()
        self.child: dict[str, Schedule] = {}
        self._refresh_children()

    # ---- tree structure -------------------------------------------------------------------
    def _child_modules(self) -> Iterator[tuple[str, nn.Module]]:
        if is_builtin_leaf(self.mod):
            return
        for name, sub in self.mod.named_children():
            if _is_list_like(sub):
                for idx, item in sub.named_children():
                    yield f"{name}.{idx}", item
            else:
                yield name, sub

    def _refresh_children(self) -> None:
        """Re-derive children from `self.mod`, keeping schedules whose module is unchanged."""
        old = self.child
        self.child = {}
        for name, sub in self._child_modules():
            prev = old.get(name)
            path = f"{self.path}.{name}" if self.path else name
            if prev is not None and prev.mod is sub:
                prev.parent, prev.path = self, path
                prev._refresh_children()
                self.child[name] = prev
            else:
                self.child[name] = Schedule(sub, name, path, self, self.group, self.backend)

    def _replace_module(self, new: nn.Module) -> None:
        """Swap `self.mod` for `new`, moving the hooks, at every reference in the root's tree.

        A module reachable by two paths (one object held by two parents) is replaced on both, so
        the paths keep computing the same thing (a row-parallel layer gets its collective on
        both); every schedule node of the old module then holds the new one."""
        old = self.mod
        if new is old:
            return
        transfer_hooks(old, new)
        top = self.get_top_schedule()
        if not swap_everywhere(top.mod, old, new) and self.parent is not None:
            set_submodule(self.parent.mod, self.name, new)  # the parent is not below the root
        nodes = [node for _, node in top.named_schedules() if node.mod is old]
        for node in nodes if self in nodes else [*nodes, self]:
            node.mod = new
            node._refresh_children()

    def _walk(self, key: str) -> tuple[Schedule, str]:
        """The deepest node `key` leads to and the part of `key` left unmatched ("" if found)."""
        tokens = key.split(".") if key else []
        node = self
        i = 0
        while i < len(tokens):
            # the longest run of tokens that names a child ("layers.0" is one child)
            for j in range(len(tokens), i, -1):
                cand = ".".join(tokens[i:j])
                if cand in node.child:
                    node, i = node.child[cand], j
                    break
            else:
                return node, ".".join(tokens[i:])
        return node, ""

    def _lookup(self, key: str) -> Schedule | None:
        node, rest = self._walk(key)
        return None if rest else node

    def __getitem__(self, key: str) -> Schedule:
        node, rest = self._walk(key)
        if not rest:
            return node
        # report from where the walk stopped: the root's children say nothing about 'a.b.c'
        where = node.path or "<root>"
        msg = (
            f"sch[{key!r}]: no such submodule {rest!r} under '{where}' "
            f"({type(node.mod).__name__}); its children are {sorted(node.child)}"
        )
        if isinstance(node.mod, CheckPointWrapper) and "mod" in node.child:
            msg += f"; '{where}' is checkpointed, the block is at '{node.child['mod'].path}'"
        raise SchedulePathError(msg)

    def __contains__(self, key: str) -> bool:
        return self._lookup(key) is not None

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name not in PRIMITIVES:
            raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")
        cls = PRIMITIVES[name]
        meta = self.__dict__["metadata"].primitives
        if name not in meta:
            meta[name] = cls.init_metadata()
        return partial(cls.apply, self)

    def __repr__(self) -> str:
        return f"Schedule(path={self.path!r}, mod={type(self.mod).__name__})"

    def named_schedules(self, prefix: str = "") -> Iterator[tuple[str, Schedule]]:
        """Yield ``(relative_name, schedule)`` for this schedule and every descendant."""
        yield prefix, self
        for name, sub in self.child.items():
            yield from sub.named_schedules(f"{prefix}.{name}" if prefix else name)

    def get_module(self, name: str) -> nn.Module:
        """The submodule at dotted path `name` (``""`` is this schedule's module)."""
        return self.mod.get_submodule(name) if name else self.mod

    def get_top_schedule(self) -> Schedule:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def owner_of(self, mod: nn.Module) -> Schedule | None:
        """The schedule (in this subtree) whose module is `mod`."""
        for _, sub in self.named_schedules():
            if sub.mod is mod:
                return sub
        return None

    # ---- tracing and search (implemented in tracer.py / find.py) ---------------------------
    def trace(
        self,
        recursive: bool = True,
        flatten: bool = False,
        leaf_modules: list[str] | None = None,
        tracer: str = "pytorch",
        concrete_args: dict | None = None,
        config: dict | None = None,
    ) -> bool:
        """Turn `self.mod` into an fx `GraphModule` (children stay leaves unless `flatten`)."""
        from .tracer import trace_schedule

        return trace_schedule(self, recursive, flatten, leaf_modules, tracer, concrete_args, config)

    def trace_until(
        self,
        paths: str | list[str],
        tracer: str = "pytorch",
        concrete_args: dict | None = None,
        leaf_modules: list[str] | None = None,
        config: dict | None = None,
    ) -> bool:
        """Flatten-trace the root down to `paths`; their children become graph leaves."""
        from .tracer import trace_until

        return trace_until(self, paths, tracer, concrete_args, leaf_modules, config)

    def find_node(self, fn: Callable[[fx.Node], bool]) -> list[tuple[str, fx.Node]]:
        """All fx nodes (in this subtree's graphs) for which `fn(node)` is true."""
        from .find import find_node

        return find_node(self, fn)

    def find_subgraph(self, pattern: Any) -> list[list[tuple[str, fx.Node]]]:
        """Greedy matches of `pattern` (a function or a `Pattern` module)."""
        from .find import find_subgraph

        return find_subgraph(self, pattern)

    def find(self, node_pattern: Any) -> list:
        """`find(regex)` -> call_module nodes; `find(fn | Pattern)` -> list of subgraphs."""
        from .find import find

        return find(self, node_pattern)


def create_schedule(
    root: nn.Module,
    name: str = "",
    path: str = "",
    parent: Schedule | None = None,
    group: Any = None,
    backend: str = "native",
) -> Schedule:
    """Wrap `root` in a schedule tree; `group` is the tensor-parallel process group.

    `backend="dtensor"` records `shard`/`sync` and lowers them to DTensor tensor-parallel styles
    in `build` (see `sharding.dtensor`); the default applies them at once with plain tensors.
    """
    return Schedule(root, name, path, parent, group, backend)
