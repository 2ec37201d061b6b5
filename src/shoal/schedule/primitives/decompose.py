"""`sch.decompose()`: split an `nn.Linear` into matmul + bias add (`LinearWithSeparateBias`).

The separate add becomes visible to fx, so `find` can match e.g. ``gelu(bias + x)`` and `fuse`
it. Must come before `shard` (the bias must still be whole).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import schedule_error
from ..op.linear import LinearWithSeparateBias
from .base import Primitive, register_primitive


@register_primitive()
class DecomposePrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "decompose"

    @staticmethod
    def is_verifiable() -> bool:
        return True

    @staticmethod
    def apply(sch: Any) -> None:
        mod = sch.mod
        if not isinstance(mod, nn.Linear) or isinstance(mod, LinearWithSeparateBias):
            raise schedule_error(
                "decompose", sch.path, f"needs nn.Linear, got {type(mod).__name__}"
            )
        if (sch.metadata.primitives.get("shard") or {}).get("sharded"):
            raise schedule_error("decompose", sch.path, "must be applied before shard")
        sch.replace(LinearWithSeparateBias.from_linear(mod))
