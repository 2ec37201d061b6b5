"""`sch.annotate(param_name, key, value)`: tag a parameter with an attribute.

The key is also recorded on the root schedule so that later re-creations of the parameter
(`shard`, weight consolidation in `build`) copy the tag to the new tensor.
"""

from __future__ import annotations

from typing import Any

from ..errors import schedule_error
from .base import Primitive, register_primitive


@register_primitive()
class AnnotatePrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "annotate"

    @staticmethod
    def apply(sch: Any, param_name: str, key: str, value: Any) -> None:
        param = sch.mod._parameters.get(param_name, sch.mod._buffers.get(param_name))
        if param is None:
            raise schedule_error(
                f"annotate({param_name!r}, {key!r})",
                sch.path,
                f"{type(sch.mod).__name__} has no parameter or buffer named {param_name!r}",
            )
        setattr(param, key, value)
        sch.get_top_schedule().metadata.param_tags.add(key)
