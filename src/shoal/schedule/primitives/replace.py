"""`sch.replace(new, target_ops=None, name=None, concrete_args=None)`.

Without `target_ops` the whole module is swapped for `new` under the same name, keeping its
hooks. With `target_ops` (from `sch.find`), one subgraph is replaced vertically and several
horizontally (see `graph_edit`); a function may replace a single node, keeping its arguments.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import schedule_error
from ..graph_edit import horizontal_replace, normalize_matches, vertical_replace
from .base import Primitive, register_primitive


@register_primitive()
class ReplacePrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "replace"

    @staticmethod
    def apply(
        sch: Any,
        new_mod_or_func: Any,
        target_ops: Any = None,
        name: str | None = None,
        concrete_args: dict | None = None,
    ) -> Any:
        if target_ops is None:
            if not isinstance(new_mod_or_func, nn.Module):
                raise schedule_error(
                    "replace", sch.path, "replacing a whole module needs an nn.Module"
                )
            sch._replace_module(new_mod_or_func)
            return new_mod_or_func
        matches = normalize_matches(target_ops, "replace", sch.path)
        if len(matches) == 1:
            return vertical_replace(sch, matches[0], new_mod_or_func, name, concrete_args)
        if not isinstance(new_mod_or_func, nn.Module):
            raise schedule_error("replace", sch.path, "horizontal replacement needs an nn.Module")
        if concrete_args:
            raise schedule_error("replace", sch.path, "concrete_args only apply to one subgraph")
        return horizontal_replace(sch, matches, new_mod_or_func, name)
