"""Activation checkpointing: `checkpoint(fn, *args)` and the `CheckPointWrapper` module.

`checkpoint` is `torch.utils.checkpoint.checkpoint` (non-reentrant by default: it restores the
CPU and CUDA RNG state on recompute, so dropout masks match). When the model-parallel RNG stream
is in use, its state is restored on recompute as well. `CheckPointWrapper` passes keyword
arguments through (the non-reentrant checkpoint replays them, so Hugging Face blocks called with
``attention_mask=...`` keep their meaning); a user `order_args_fn` may still turn them into
positional ones, as Slapo's reentrant checkpoint required.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.utils.checkpoint as torch_ckpt
from torch import nn

from .random import get_cuda_rng_tracker


def checkpoint(function: Callable, *args: Any, use_reentrant: bool = False, **kwargs: Any) -> Any:
    """Run `function(*args)` without keeping its activations; recompute them in backward."""
    tracker = get_cuda_rng_tracker()
    if tracker.states:
        function = _with_tracker_replay(function, tracker)
    return torch_ckpt.checkpoint(function, *args, use_reentrant=use_reentrant, **kwargs)


def _with_tracker_replay(function: Callable, tracker: Any) -> Callable:
    snapshot = tracker.get_states()
    first = [True]

    def run(*args: Any, **kwargs: Any) -> Any:
        current = tracker.get_states()
        tracker.set_states(snapshot)
        out = function(*args, **kwargs)
        if first[0]:
            first[0] = False  # the real forward: leave the stream advanced
        else:
            tracker.set_states(current)  # recompute: do not disturb the stream
        return out

    return run


class CheckPointWrapper(nn.Module):
    """Runs the wrapped module under `checkpoint` in training; plainly otherwise."""

    traceable = False

    def __init__(self, mod: nn.Module, order_args_fn: Callable | None = None) -> None:
        super().__init__()
        self.mod = mod
        self.order_args_fn = order_args_fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.order_args_fn is not None:
            args, kwargs = tuple(self.order_args_fn(*args, **kwargs)), {}
        if not self.training:
            return self.mod(*args, **kwargs)
        return checkpoint(self.mod, *args, **kwargs)
