"""`shoal.Job`: what a user hands shoal, and loading it from a job file.

A job file is a Python file exposing `make_job(**options) -> Job`. Every worker imports it
and calls `make_job` with the same options, so factories (model, optimizer, scheduler) are
plain callables and nothing needs pickling. Both run with the global generators seeded alike
(`JOB_CODE_SEED`), so data a job draws without a generator of its own is the same everywhere.
"""

from __future__ import annotations

import importlib.util
import inspect
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.errors import UserError


@dataclass(frozen=True)
class Job:
    model: Callable[[], Any]  # () -> torch.nn.Module
    optimizer: Callable[[Any], Any]  # parameters -> torch.optim.Optimizer
    dataset: Any  # map-style: __len__ and __getitem__ (read in batches if it has __getitems__)
    loss_fn: Callable[[Any, Any], Any]  # (model, batch) -> scalar loss tensor
    micro_batch_size: int
    global_batch_size: int
    seed: int = 0
    lr_scheduler: Callable[[Any], Any] | None = None  # optimizer -> scheduler, stepped per step
    collate_fn: Callable[[list], Any] | None = None  # default: torch's default_collate
    shuffle: bool = True
    workload: str | None = None  # catalog workload whose measured speeds emulated devices use
    # adaptive global batch: a policy name (see shoal.control.batch_policy) and its parameters
    # (bounds as "LOW:HIGH", every, lr_scaling, or the policy's own); --batch-* flags override
    batch_policy: str | None = None
    batch_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b, B = self.micro_batch_size, self.global_batch_size
        if not isinstance(b, int) or b < 1:
            raise UserError(f"micro_batch_size must be a positive integer, got {b!r}")
        if not isinstance(B, int) or B < 1:
            raise UserError(f"global_batch_size must be a positive integer, got {B!r}")
        if B % b:
            raise UserError(f"global_batch_size {B} is not a multiple of micro_batch_size {b}")
        for name in ("model", "optimizer", "loss_fn"):
            if not callable(getattr(self, name)):
                raise UserError(f"Job.{name} must be callable")
        if not hasattr(self.dataset, "__len__") or not hasattr(self.dataset, "__getitem__"):
            raise UserError("Job.dataset must be map-style (define __len__ and __getitem__)")
        if len(self.dataset) < b:
            raise UserError(
                f"the dataset has {len(self.dataset)} samples, fewer than one micro-batch ({b})"
            )

    @property
    def num_micro_batches(self) -> int:
        return self.global_batch_size // self.micro_batch_size


JOB_CODE_SEED = 0  # the global generators' seed whenever a job file's own code runs


def _same_draws() -> None:
    """Seed the global generators (torch's, `random`'s, numpy's) before a job file's own code
    runs: data it draws without a generator of its own (torch.randn at import or in make_job)
    is then the same on every worker, as exact training across workers needs. torch starts
    each process from a random seed, so such a dataset differed per worker, silently."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(JOB_CODE_SEED)
    random.seed(JOB_CODE_SEED)
    np.random.seed(JOB_CODE_SEED)


def load_job_file(path: str | pathlib.Path) -> Callable[..., Job]:
    """Import a job file and return its `make_job`. Its directory goes first on sys.path, as
    `python job.py` puts it, so that the job can import the modules beside it."""
    path = pathlib.Path(path)
    if not path.is_file():
        why = "is not a file" if path.exists() else "does not exist"
        raise UserError(f"job file {str(path)!r} {why}")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"shoal_job_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import job file {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _same_draws()
    spec.loader.exec_module(module)
    make_job = getattr(module, "make_job", None)
    if not callable(make_job):
        raise UserError(f"job file {str(path)!r} does not define make_job(**options)")
    return make_job


def build_job(make_job: Callable[..., Job], options: dict[str, Any], seed: int | None) -> Job:
    """Call `make_job(**options)`, checking the options and the result; apply a seed override."""
    params = inspect.signature(make_job).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = [k for k in options if k not in params and not takes_any]
    if unknown:
        raise UserError(f"make_job does not take option(s): {', '.join(sorted(unknown))}")
    _same_draws()
    job = make_job(**options)
    if not isinstance(job, Job):
        raise UserError(f"make_job returned {type(job).__name__}, not shoal.Job")
    if seed is not None:
        from dataclasses import replace

        job = replace(job, seed=seed)
    return job


def parse_options(items: list[str]) -> dict[str, Any]:
    """Parse ``key=value`` pairs; values are Python literals when they parse, else strings."""
    import ast

    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UserError(f"bad option {item!r} (expected key=value)")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options
