"""Reshard strings for `sync`: ``"RR->RS"``, ``"SR->RR"``, ``"RS->SR"``, ...

The two letters describe the last two dimensions (..., -2, -1): R replicated, S sharded. A
transition is lowered to a split, an all-gather or an all-to-all (with conjugate backward).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .sync_ops import all_gather_forward_output, all_to_all_forward, scatter_forward_output

_LAYOUTS = ("RR", "RS", "SR")


def is_reshard_string(op: Any) -> bool:
    return isinstance(op, str) and "->" in op


def reshard_fn(spec: str, group: Any = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function implementing `spec` (raises ValueError for an unknown transition)."""
    src, _, dst = spec.replace(" ", "").partition("->")
    if src not in _LAYOUTS or dst not in _LAYOUTS:
        raise ValueError(f"unknown reshard {spec!r}; layouts are {_LAYOUTS}")
    if src == dst:
        return lambda x: x
    if src == "RR":
        dim = -1 if dst == "RS" else -2
        return lambda x: scatter_forward_output(x, dim % x.dim(), group)
    if dst == "RR":
        dim = -1 if src == "RS" else -2
        return lambda x: all_gather_forward_output(x, dim % x.dim(), group, False)
    if src == "RS":  # RS -> SR: (.., s, h/p) -> (.., s/p, h)
        return lambda x: all_to_all_forward(x, x.dim() - 2, x.dim() - 1, group)
    return lambda x: all_to_all_forward(x, x.dim() - 1, x.dim() - 2, group)  # SR -> RS
