"""`sch.cut_pipeline_stage()`: end a pipeline stage after this module.

The parent, or the nearest traced ancestor whose flattened graph calls this module, must have
been traced (usually `root.trace_until(...)`); that graph's call node for this module gets
``meta["partition"] = True``, which `build(target="pipeline")` splits on.
"""

from __future__ import annotations

from typing import Any

from torch import fx

from ..errors import schedule_error
from .base import Primitive, register_primitive


@register_primitive()
class CutPipelineStagePrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "cut_pipeline_stage"

    @staticmethod
    def apply(sch: Any) -> None:
        parent = sch.parent
        if parent is None:
            raise schedule_error("cut_pipeline_stage", sch.path, "cannot cut after the root")
        # the nearest traced ancestor: a flattened `trace_until` inlines the modules in between
        # (GPT2LMHeadModel's "transformer"), so its graph calls "transformer.h.0" directly
        owner, target = parent, sch.name
        while owner is not None and not isinstance(owner.mod, fx.GraphModule):
            target = f"{owner.name}.{target}"
            owner = owner.parent
        if owner is None:
            raise schedule_error(
                "cut_pipeline_stage", sch.path, "the parent is not traced; call trace_until first"
            )
        nodes = [n for n in owner.mod.graph.nodes if n.op == "call_module" and n.target == target]
        if not nodes:
            raise schedule_error("cut_pipeline_stage", sch.path, "no call of it in the parent")
        nodes[-1].meta["partition"] = True
        node = parent
        while node is not None:  # ancestors remember that a cut lies below them
            node.metadata.primitives.setdefault("cut_pipeline_stage", []).append(sch.path)
            node = node.parent
