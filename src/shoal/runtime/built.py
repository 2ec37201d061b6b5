"""What a job's factories build and its loss function returns, checked where first used.

`Job` checks its field values when it is made (job.py); what the factories build can only be
checked once they run: a model that is not an `nn.Module` (or has lazy, uninitialized
parameters, or SyncBatchNorm layers), an optimizer that is not an `Optimizer` (or whose step()
needs a closure, or that needs sparse gradients), a scheduler whose step() needs a metric, a
loss that is not a one-element tensor with a graph. Each is one line naming the Job field (a
UserError), not an exception from inside shoal. The trainer builds through these, and so does
the launcher wherever it builds the model before any worker starts (the fingerprint of a
resume, the host's speed).
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
    if any(torch.nn.parameter.is_lazy(p) for p in model.parameters()):
        # their shapes are unknown until a forward pass, and the exact sum lays out every
        # gradient before the first one (a worker's own first micro-batch would set them)
        raise UserError(
            "Job.model has uninitialized parameters (a lazy module such as LazyLinear): build "
            "them in the factory, e.g. by running one dummy batch through the model"
        )
    if any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules()):
        # its forward all-gathers statistics over the group: alone with one worker, on two a
        # collective that meets the others' at other micro-batches (or none, on the CPU)
        raise UserError(
            "Job.model has SyncBatchNorm layers: shoal computes each micro-batch alone, with "
            "BatchNorm's statistics of that micro-batch (as DDP's BatchNorm); use BatchNorm"
        )
    return model.to(device).train()


def built_optimizer(job: Job, model: torch.nn.Module) -> torch.optim.Optimizer:
    # a list, not model.parameters()'s generator: a factory that splits the parameters into
    # groups (weight decay for p.ndim >= 2 only) reads them twice, and a second pass over a
    # generator is empty: that group's parameters were silently never stepped
    optimizer = job.optimizer(list(model.parameters()))
    name = type(optimizer).__name__
    if not isinstance(optimizer, torch.optim.Optimizer):  # param_groups, state_dict: used
        raise UserError(f"Job.optimizer must return a torch.optim.Optimizer, got {name}")
    if isinstance(optimizer, torch.optim.SparseAdam):  # it refuses dense ones at its first step
        raise UserError(
            "Job.optimizer built a SparseAdam, which needs sparse gradients: shoal sums every "
            "gradient densely (a sparse embedding's too); use Adam or SGD"
        )
    if _needs_arguments(optimizer.step):  # e.g. LBFGS's step(closure)
        raise UserError(
            f"Job.optimizer built a {name}, whose step() needs arguments (a closure): shoal "
            "steps the optimizer once per step, on the summed gradient, with none"
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
    if _needs_arguments(step):  # e.g. ReduceLROnPlateau's step(metrics)
        raise UserError(
            f"Job.lr_scheduler built a {type(scheduler).__name__}, whose step() needs arguments: "
            "shoal steps the scheduler once per optimizer step, with no metric"
        )
    return scheduler


def _needs_arguments(method) -> bool:
    """Whether `method()` cannot be called without arguments, as its signature reads."""
    try:
        inspect.signature(method).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read (a builtin): it is called as it is
        pass
    return False


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
