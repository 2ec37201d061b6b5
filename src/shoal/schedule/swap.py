"""Swapping one object for another at every reference below a root module.

A parameter tied between two modules, or a submodule reachable by two paths (one module object
held by two parents), must be replaced everywhere at once, or the holders silently diverge:
`shard` swaps tensors this way and `Schedule.replace` (hence `sync`, `checkpoint`, `decompose`)
swaps modules this way.
"""

from __future__ import annotations

import torch
from torch import nn


def swap_everywhere(
    root: nn.Module, old: nn.Module | torch.Tensor, new: nn.Module | torch.Tensor
) -> list[nn.Module]:
    """Replace every reference to `old` (parameter, buffer or submodule) below `root` by `new`.

    Returns the modules that held a reference, once per reference (a module holding `old` under
    two names appears twice). The modules are listed before anything is swapped, so a `new`
    that wraps `old` (a checkpoint wrapper) keeps its own reference."""
    owners = []
    for mod in list(root.modules()):
        for table in (mod._parameters, mod._buffers, mod._modules):
            for key, value in table.items():
                if value is old:
                    table[key] = new
                    owners.append(mod)
    return owners
