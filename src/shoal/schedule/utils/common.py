"""`slapo.utils.common`: module hooks and small predicates used by schedules.

`get_hooks`, `has_hooks` and `transfer_hooks` are those of `shoal.schedule.hooks` (every
PyTorch 2.x hook dict and flag travels, not only the three Slapo copied);
`transfer_hooks_for_fusion` moves the hooks of the first and last module of a fused chain onto
the fused module, as a vertical replacement does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ..hooks import get_hooks, has_hooks, transfer_hooks


def transfer_hooks_for_fusion(mods: Sequence[nn.Module], new_mod: nn.Module) -> None:
    """Move the first module's ``fwd_pre``/``bwd_post`` hooks and the last module's ``fwd_post``
    hooks onto `new_mod`; a hook on a middle module cannot be kept and raises `RuntimeError`."""
    if not mods:
        return
    for mid in mods[1:-1]:
        if has_hooks(mid):
            raise RuntimeError(f"cannot fuse: {type(mid).__name__} in the middle has hooks")
    first, last = mods[0], mods[-1]
    if len(mods) > 1 and (has_hooks(first, ("fwd_post",)) or has_hooks(last, ("fwd_pre",))):
        raise RuntimeError("cannot fuse: a hook sits between fused modules")
    transfer_hooks(first, new_mod, ("fwd_pre", "bwd_post", "bwd_pre"))
    transfer_hooks(last, new_mod, ("fwd_post",))


def is_lambda_function(obj: Any) -> bool:
    return callable(obj) and getattr(obj, "__name__", "") == "<lambda>"


def is_module_list(mod: nn.Module) -> bool:
    """A ModuleList, or a plain container whose children are named 0..n-1 (what fx makes of one)."""
    if isinstance(mod, nn.ModuleList):
        return True
    names = [name for name, _ in mod.named_children()]
    return type(mod) is nn.Module and bool(names) and names == [str(i) for i in range(len(names))]


__all__ = [
    "get_hooks",
    "has_hooks",
    "is_lambda_function",
    "is_module_list",
    "transfer_hooks",
    "transfer_hooks_for_fusion",
]
