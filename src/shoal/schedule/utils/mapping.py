"""`slapo.utils.mapping`: which functional op is which module (`F.relu` ~ `nn.ReLU`), the table
`find` uses to match a functional pattern against a module call and back."""

from __future__ import annotations

from torch import nn

from ..find import _EQUIV

MAPPING_FROM_FUNCTIONAL_TO_MODULE: dict = {
    fn: mod
    for objs in _EQUIV.values()
    for mod in objs
    if isinstance(mod, type) and issubclass(mod, nn.Module)
    for fn in objs
    if not (isinstance(fn, type) and issubclass(fn, nn.Module))
}

__all__ = ["MAPPING_FROM_FUNCTIONAL_TO_MODULE"]
