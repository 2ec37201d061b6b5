"""The job's code must compute the same bits whenever it runs from the same state and seeds.

Exact mode makes a micro-batch's samples, random draws and gradient functions of (seed, step,
micro-batch) by seeding the global generators (torch's, `random`'s, numpy's) before each read
and each forward pass. Code that draws from a generator of its own (`torch.Generator`, numpy's
`default_rng`), or a forward pass that changes state other than the model's buffers (which
the trainer restores before each micro-batch): a Python counter on the module, a frozen
parameter moved as a running average, escapes that seeding: its numbers depend on what the
process ran before, so on the workers, and the digest silently differs between layouts. Both
checks here compare two computations that must agree and refuse the job in one line if they
do not:

- `check_reads`: micro-batch 0 of step 0 read twice more when a worker starts;
- `check_passes`: each micro-batch's loss in two passes of one step, which exact mode computes
  anyway (the first step probes its bounds, then sums; so does a step whose bound overflowed).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from shoal.errors import UserError

OWN_GENERATOR = (
    "a generator of its own (torch.Generator, numpy's default_rng), which shoal does not seed"
)
DEPENDS = "so the result would depend on the workers"


def check_reads(first, second) -> None:
    """`first` and `second`: micro-batch 0 of step 0, read twice, each after the seeding the
    trainer does (`Trainer.check_reads`)."""
    a, b = list(_leaves(first)), list(_leaves(second))
    if len(a) != len(b) or not all(_same(x, y) for x, y in zip(a, b, strict=True)):
        raise UserError(
            "Job.dataset (with its collate_fn) read micro-batch 0 differently when read again "
            f"with the same seeds: it draws from {OWN_GENERATOR}, {DEPENDS} (draw from torch's, "
            "random's or numpy's global generator)"
        )


def check_passes(step: int, before: dict[int, float], after: dict[int, float]) -> None:
    """Two passes of `step` computed each micro-batch from the same state, batch and seeds:
    their losses must be the same bits (NaN as NaN). `before` is empty after a step's first
    pass, which is almost every step: nothing to compare."""
    if not before:
        return
    for j, loss in after.items():
        first = before.get(j)
        if first is None or first == loss or (math.isnan(first) and math.isnan(loss)):
            continue
        raise UserError(
            f"Job.loss_fn gave micro-batch {j} of step {step} the loss {first!r}, then {loss!r}, "
            f"from the same state, batch and seeds: the model draws from {OWN_GENERATOR}, or "
            "its forward pass changes state that is not a buffer (a Python attribute, a "
            f"parameter; buffers are restored before each micro-batch), {DEPENDS}"
        )


def _leaves(batch):
    """The values in a batch (tensors, arrays, numbers, strings), in order; other objects
    (which may compare by identity) are left out."""
    if isinstance(batch, dict):
        for key in batch:
            yield from _leaves(batch[key])
    elif isinstance(batch, (list, tuple)):
        for item in batch:
            yield from _leaves(item)
    elif isinstance(batch, (torch.Tensor, np.ndarray, int, float, str, bytes)):
        yield batch


def _same(a, b) -> bool:
    """Whether two leaves hold the same bits (a NaN equals itself)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        a, b = torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(np.ascontiguousarray(b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if (a.dtype, a.shape, a.layout) != (b.dtype, b.shape, b.layout):
            return False
        if a.layout != torch.strided or a.is_complex():
            return torch.equal(a, b)
        return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b
