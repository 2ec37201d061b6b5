"""`sch.replace_all(target_mod_type, make_mod_fn, **kwargs)`: replace every module of a type.

The list of candidates is taken before any replacement, so a new module that is itself an
instance of `target_mod_type` is not replaced again; a module held by two parents is one
candidate (replaced on both paths at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from .base import Primitive, register_primitive


@register_primitive()
class ReplaceAllPrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "replace_all"

    @staticmethod
    def apply(
        sch: Any,
        target_mod_type: type[nn.Module],
        make_mod_fn: Callable[..., nn.Module],
        **kwargs: Any,
    ) -> int:
        targets, seen = [], set()
        for path, sub in sch.named_schedules():
            # a module held by two parents has a node on each path; `replace` swaps it on both
            if path and isinstance(sub.mod, target_mod_type) and id(sub.mod) not in seen:
                seen.add(id(sub.mod))
                targets.append((path, sub))
        for path, sub in targets:
            sub.replace(make_mod_fn(path, sub.mod, **kwargs))
        return len(targets)
