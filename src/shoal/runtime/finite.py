"""Non-finite values: the step's one decision, taken from values every worker holds bit for bit.

A step is non-finite when a micro-batch's loss or the step's mean gradient is NaN or infinite.
Both are exact shared values after the step's collective (the losses travel as float64 bits,
one slot per micro-batch; the mean gradient is the same bits on every worker in exact mode, and
the result of one all-reduce in fast mode), so every worker of every layout takes the same
branch. `--on-nonfinite stop` (the default) ends the run at the first such step, naming it and
the first offending micro-batch, with the state still at that step's start (the last finite
one); `--on-nonfinite skip` drops the step's update as AMP's grad scaler does: the samples are
consumed, parameters, optimizer and scheduler are untouched, and the count goes to result.json.

Only when the gradient alone is non-finite is its micro-batch looked for, by recomputing this
worker's micro-batches one at a time (seeded by (seed, step, j), so bitwise the same) and
agreeing on the smallest index (MIN all-reduce): a cost paid on the failing path only.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.distributed as dist

from shoal.errors import UserError
from shoal.plan import micro_batch_seed
from shoal.runtime.membership import collective
from shoal.runtime.precision import forward_backward

POLICIES = ("stop", "skip")
# an exact step computed this many times over without a usable sum is not going to get one:
# a probe pass fixes every bound, so a healthy step needs at most two passes after an overflow
MAX_PASSES = 4


class NonFiniteStep(UserError):
    """The run met a non-finite loss or gradient under `--on-nonfinite stop`."""


def first_nonfinite_loss(losses: list[float]) -> int | None:
    """The index of the first micro-batch whose loss is NaN or infinite, or None."""
    return next((j for j, v in enumerate(losses) if not math.isfinite(v)), None)


def gradient_finite(reducer) -> bool:
    """Whether the step's mean gradient is finite everywhere (one pass over the flat buffer
    that the parameters' .grad are views of, in either consistency mode)."""
    flat = reducer.fixed.flat_grad if reducer.fixed else reducer.flat_grad
    return bool(torch.isfinite(flat).all())


def locate_gradient(trainer, mine: range, num_micro_batches: int) -> int:
    """The first micro-batch (over the group) whose own gradient is non-finite: each worker
    recomputes its micro-batches one by one, then the group agrees on the smallest index."""
    from shoal.runtime.trainer import seed_everything  # the trainer imports this module

    params = trainer.reducer.params
    scale = trainer.loss_scale.scale
    initial = [b.clone() for b in trainer.model.buffers()]
    found = num_micro_batches
    for j in mine:
        trainer._set_buffers(initial)
        _, batch = trainer._micro_batch(trainer.step, trainer.samples_seen, j, consume=True)
        seed_everything(micro_batch_seed(trainer.job.seed, trainer.step, j))
        for p in params:
            p.grad.zero_()
        forward_backward(trainer.job, trainer.model, batch, trainer.device, scale)
        if not gradient_finite(trainer.reducer):
            found = j
            break
    trainer._set_buffers(initial)
    for p in params:
        p.grad.zero_()
    if trainer.world_size > 1:
        t = torch.tensor([found], dtype=torch.int64, device=params[0].device)
        collective(dist.all_reduce, t, op=dist.ReduceOp.MIN)
        found = int(t.item())
    return found


def check_step(trainer, losses: list[float] | None, mine: range, num_micro_batches: int) -> bool:
    """After the step's collective, before the update: True if the step is to be skipped.
    Raises NonFiniteStep under the `stop` policy, and whatever the policy when `losses` is None:
    the exact sum found no usable bound in MAX_PASSES passes (a gradient no grid can hold)."""
    bad_loss = first_nonfinite_loss(losses) if losses is not None else None
    if bad_loss is None and losses is not None:
        if gradient_finite(trainer.reducer):
            return False
        if trainer.loss_scale.dynamic:  # the scale overflowed: skipped, as GradScaler skips
            return True  # (and backed off: precision.py)
    if bad_loss is not None:
        what, j = "loss", bad_loss
    else:
        what, j = "gradient", locate_gradient(trainer, mine, num_micro_batches)
    where = f"step {trainer.step}" + (f", micro-batch {j}" if j < num_micro_batches else "")
    if trainer.on_nonfinite == "skip" and losses is not None:
        trainer.nonfinite_skipped += 1
        sys.stderr.write(f"shoal: warning: non-finite {what} at {where}: step skipped\n")
        return True
    hint = (
        "--on-nonfinite skip skips such steps"
        if trainer.on_nonfinite == "stop"
        else "no exact bound held the sum, so it could not be skipped"
    )
    raise NonFiniteStep(
        f"non-finite {what} at {where}; the state is kept at the start of step {trainer.step} "
        f"({hint})"
    )
