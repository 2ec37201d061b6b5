"""`Verify`: check numerically that the schedule applied in a block preserves the model.

On entry the model is copied. On exit the copy's weights are broadcast from the group's first
rank and loaded into the scheduled model (sliced along the recorded shard axis for sharded
parameters), then both run `example_inputs` from the same seed and their outputs must match.
Any mismatch raises `VerificationError` (an `AssertionError`, as in Slapo).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from .errors import VerificationError
from .random import set_random_seed
from .sharding import collectives
from .sharding.dtensor import apply_dtensor_plans

if TYPE_CHECKING:
    from .schedule import Schedule

_SEED = 2023


def _first_tensor(value: Any) -> Any:
    if isinstance(value, tuple | list) and value:
        return _first_tensor(value[0])
    if isinstance(value, dict) and value:
        return _first_tensor(next(iter(value.values())))
    return value


class Verify:
    """Context manager; see the module docstring."""

    def __init__(
        self,
        sch: Schedule,
        example_inputs: Sequence[Any],
        device: torch.device | str | None = None,
        eval_mode: bool = True,
        enable: bool = True,
        rtol: float | None = None,
        atol: float | None = None,
    ) -> None:
        self.sch = sch
        self.example_inputs = list(example_inputs)
        self.device = device
        self.eval_mode = eval_mode
        self.enable = enable
        self.tol = {} if rtol is None and atol is None else {"rtol": rtol, "atol": atol}

    def __enter__(self) -> Verify:
        if not self.enable:
            return self
        model = self.sch.mod
        self.original = copy.deepcopy(model)
        copies = dict(self.original.named_parameters(remove_duplicate=False))
        # strong references keep ids unique while the block runs
        self._keep = list(model.parameters())
        self._src = {
            id(p): copies[name] for name, p in model.named_parameters(remove_duplicate=False)
        }
        self._by_name = copies
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is not None or not self.enable:
            return False
        if self.sch.backend == "dtensor":
            apply_dtensor_plans(self.sch.get_top_schedule())
        model = self.sch.mod
        group, world = self.sch.group, self.sch.world_size
        distributed = dist.is_available() and dist.is_initialized() and world > 1
        device = torch.device(self.device) if self.device else _device_of(model)
        self.original.to(device)
        with torch.no_grad():
            if distributed:
                for p in self.original.parameters():
                    if getattr(p, "shard_axis", None) is None:  # shards differ by design
                        dist.broadcast(p.data, src=collectives.first_rank(group), group=group)
            for name, p in model.named_parameters():
                # a parameter that existed on entry first, then the one it was sharded from
                src = self._src.get(id(p))
                if src is None:
                    src = self._src.get(getattr(p, "shard_source_id", None))
                src = src if src is not None else self._by_name.get(name)
                if src is not None:
                    _load(p, src.data, world, self.sch.rank)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in self.example_inputs]
        was_training = model.training
        for m in (self.original, model):
            m.train(not self.eval_mode)
        set_random_seed(_SEED)
        expected = _first_tensor(self.original(*inputs))
        set_random_seed(_SEED)
        actual = _first_tensor(model(*inputs))
        model.train(was_training)
        self._keep = []
        try:
            torch.testing.assert_close(actual, expected, **self.tol)
        except AssertionError as err:
            where = self.sch.path or "<root>"
            raise VerificationError(
                f"Verify on '{where}': the scheduled model's output differs from the "
                f"original's: {str(err).splitlines()[0]} {str(err).splitlines()[-1]}"
            ) from None
        return False


def _load(param: torch.Tensor, full: torch.Tensor, world: int, rank: int) -> None:
    """Copy the part of the original `full` value that `param` holds on this rank."""
    from torch.distributed.tensor import DTensor, Shard

    if isinstance(param, DTensor):
        local, value = param.to_local(), full
        for placement in param.placements:
            if isinstance(placement, Shard):
                value = value.chunk(world, dim=placement.dim)[rank]
        if value.shape == local.shape:
            local.copy_(value)
        return
    axis = getattr(param, "shard_axis", None)
    if axis is not None and full.shape != param.shape:
        full = full.chunk(world, dim=axis)[rank]
    if full.shape == param.shape:
        param.data.copy_(full)


def _device_of(model: nn.Module) -> torch.device:
    for p in model.parameters():
        if not p.is_meta:
            return p.device
    return torch.device("cpu")
