"""Hooks for a vocabulary-parallel `nn.Embedding` (weight sharded on axis 0).

Each rank holds rows ``[rank * V/p, (rank + 1) * V/p)``. The pre-hook shifts token ids into the
local range and sends the others to row 0; the post-hook zeroes the rows of those foreign ids
and sums over the group, so every rank ends with the full embedding output. Use as
``sch.sync("fwd_pre", pre); sch.sync("fwd_post", post)`` after ``sch.shard("weight", 0)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .sync_ops import reduce_forward_output


def vocab_parallel_embedding_hooks(sch: Any) -> tuple[Callable, Callable]:
    """(forward-pre hook, forward hook) for the embedding at `sch` (already sharded)."""
    rows = sch.mod.weight.shape[0]  # local vocabulary size
    start, end = sch.rank * rows, (sch.rank + 1) * rows
    group = sch.group
    state: dict[str, torch.Tensor] = {}

    def pre(_mod: nn.Module, inputs: tuple) -> tuple:
        ids = inputs[0]
        foreign = (ids < start) | (ids >= end)
        state["foreign"] = foreign
        return ((ids - start).masked_fill(foreign, 0), *inputs[1:])

    def post(_mod: nn.Module, _inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        output = output.masked_fill(state.pop("foreign").unsqueeze(-1), 0.0)
        return reduce_forward_output(output, group)

    return pre, post


gen_embedding_hooks = vocab_parallel_embedding_hooks
