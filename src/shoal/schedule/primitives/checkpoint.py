"""`sch.checkpoint(subgraph=None, order_args_fn=None)`: activation checkpointing.

Without a subgraph the module itself is wrapped in a `CheckPointWrapper` (same name in the
parent). With a subgraph from `find`, the matched nodes are extracted into a GraphModule, wrapped,
and replaced vertically: the new child is ``CheckPointWrapper_<k>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..checkpoint import CheckPointWrapper
from ..errors import schedule_error
from ..graph_edit import _ordered, extract_subgraph, normalize_matches, vertical_replace
from .base import Primitive, register_primitive


@register_primitive()
class CheckpointPrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "checkpoint"

    @staticmethod
    def is_verifiable() -> bool:
        return True

    @staticmethod
    def apply(sch: Any, subgraph: Any = None, order_args_fn: Callable | None = None) -> Any:
        if subgraph is None:
            if isinstance(sch.mod, CheckPointWrapper):
                raise schedule_error("checkpoint", sch.path, "module is already checkpointed")
            wrapper = CheckPointWrapper(sch.mod, order_args_fn)
            sch.replace(wrapper)
            return wrapper
        matches = normalize_matches(subgraph, "checkpoint", sch.path)
        if len(matches) != 1:
            raise schedule_error("checkpoint", sch.path, "expects exactly one subgraph")
        parent = matches[0][0][0]
        gm = sch.get_module(parent)
        nodes = _ordered(gm, [n for _, n in matches[0]])
        wrapper = CheckPointWrapper(extract_subgraph(gm, nodes), order_args_fn)
        vertical_replace(sch, matches[0], wrapper, name="CheckPointWrapper", primitive="checkpoint")
        return wrapper
