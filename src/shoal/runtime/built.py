"""What a job's factories build and its loss function returns, checked where first used.

`Job` checks its field values when it is made (job.py); what the factories return can only be
checked once they run: a model that is not an `nn.Module`, an optimizer that is not an
`Optimizer`, a scheduler whose step() needs a metric, a loss that is not a one-element tensor
with a graph. Each is one line naming the Job field (a UserError), not an exception from inside
shoal. The trainer builds through these, and so does the launcher wherever it builds the model
before any worker starts (the fingerprint of a resume, the host's speed).
"""

from __future__ import annotations

import inspect

import torch

from shoal.errors import UserError
from shoal.job import Job


def built_model(job: Job, device: torch.device | str) -> torch.nn.Module:
    model = job.model()
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"Job.model must return a torch.nn.Module, got {type(model).__name__}")
    if not any(p.requires_grad for p in model.parameters()):  # nothing to train, nor to sum
        raise UserError("Job.model has no trainable parameters (none with requires_grad)")
    return model.to(device).train()


def built_optimizer(job: Job, model: torch.nn.Module) -> torch.optim.Optimizer:
    optimizer = job.optimizer(model.parameters())
    if not isinstance(optimizer, torch.optim.Optimizer):  # param_groups, state_dict: used
        raise UserError(
            f"Job.optimizer must return a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    return optimizer


def built_scheduler(job: Job, optimizer: torch.optim.Optimizer):
    if job.lr_scheduler is None:
        return None
    scheduler = job.lr_scheduler(optimizer)
    step = getattr(scheduler, "step", None)
    if not callable(step):
        raise UserError(
            f"Job.lr_scheduler must return a scheduler with step(), got {type(scheduler).__name__}"
        )
    try:
        inspect.signature(step).bind()
    except TypeError:  # e.g. ReduceLROnPlateau's step(metrics)
        raise UserError(
            f"Job.lr_scheduler built a {type(scheduler).__name__}, whose step() needs arguments: "
            "shoal steps the scheduler once per optimizer step, with no metric"
        ) from None
    except ValueError:  # no signature to read (a builtin): it is called as it is
        pass
    return scheduler


def scalar_loss(loss: object) -> torch.Tensor:
    """`loss` if backward() can start from it: a one-element tensor computed with a graph."""
    if not isinstance(loss, torch.Tensor):
        got = type(loss).__name__
    elif loss.numel() != 1:
        got = f"a tensor of shape {tuple(loss.shape)}"
    elif not loss.requires_grad:
        got = "a tensor that does not require grad (not computed from the model's parameters)"
    else:
        return loss
    raise UserError(f"Job.loss_fn must return a scalar (one-element) tensor, got {got}")
