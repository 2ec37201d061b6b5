"""`shoal.Job`: what a user hands shoal, its field values checked, and loading it from a job file.

A job file is a Python file exposing `make_job(**options) -> Job`. Every worker imports it
and calls `make_job` with the same options, so factories (model, optimizer, scheduler) are
plain callables and nothing needs pickling. Both run with the global generators seeded alike
(`JOB_CODE_SEED`), so data a job draws without a generator of its own is the same everywhere.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.errors import UserError, unreadable


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
    # the step's gradient scaled to this total L2 norm at most, as torch.nn.utils.
    # clip_grad_norm_ before optimizer.step() (runtime/clipping.py); None: not clipped
    clip_grad_norm: float | None = None
    # mixed precision (runtime/precision.py): the loss function runs under torch.autocast with
    # this dtype, "float16" or "bfloat16" (parameters and gradients stay float32); None: off
    autocast: str | None = None
    # the loss scale, as torch.amp.GradScaler keeps one: "dynamic" (GradScaler's defaults), a
    # dict of GradScaler's init_scale, growth_factor, backoff_factor and growth_interval, or a
    # number (a fixed scale); None: not scaled
    loss_scale: float | str | dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # a bad value is refused here, when the launcher makes the job before any worker starts,
        # not as an exception from deep inside a worker's first step
        for name in ("micro_batch_size", "global_batch_size"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise UserError(f"Job.{name} must be a positive integer, got {value!r}")
        b, B = self.micro_batch_size, self.global_batch_size
        if B % b:
            raise UserError(f"Job.global_batch_size {B} is not a multiple of micro_batch_size {b}")
        _check_factories(self)
        _check_dataset(self.dataset, b)
        _check_seed(self.seed, "Job.seed")
        _check_type(self.shuffle, "Job.shuffle", bool, "True or False")
        _check_type(self.workload, "Job.workload", (str, type(None)), "a workload name or None")
        _check_type(self.batch_policy, "Job.batch_policy", (str, type(None)), "a name or None")
        _check_type(self.batch_options, "Job.batch_options", dict, "a dict of options")
        _check_clip(self.clip_grad_norm)
        if self.autocast not in AUTOCAST_DTYPES:
            raise UserError(
                f"Job.autocast must be 'float16', 'bfloat16' or None, got {_shown(self.autocast)}"
            )
        loss_scale_settings(self.loss_scale)

    @property
    def num_micro_batches(self) -> int:
        return self.global_batch_size // self.micro_batch_size


# plan/order.py's `_mix` hashes the seed as 16 signed bytes; config/__init__.py checks --seed
# against the same range (neither may import the other; a test ties both to `_mix`)
SEED_MIN, SEED_MAX = -(2**127), 2**127 - 1


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int to Python


def _check_type(value: Any, name: str, types: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, types):
        raise UserError(f"{name} must be {what}, got {type(value).__name__}")


def _check_seed(seed: Any, name: str) -> None:
    if not _is_int(seed):
        raise UserError(f"{name} must be an integer, got {type(seed).__name__}")
    if not SEED_MIN <= seed <= SEED_MAX:
        # (str() of an integer of over 4300 digits raises)
        shown = seed if seed.bit_length() <= 1024 else f"an integer of {seed.bit_length()} bits"
        raise UserError(f"{name} must be in [-2**127, 2**127 - 1], got {shown}")


def _torch_class(path: str) -> type | None:
    """torch's class at `path` ("nn.Module"), or None while torch is not imported: an instance
    of a torch class exists only once torch is, so a check needs no import of its own."""
    obj = sys.modules.get("torch")
    for part in path.split(".") if obj is not None else ():
        obj = getattr(obj, part)
    return obj


def _check_factories(job: Job) -> None:
    for name in ("model", "optimizer", "loss_fn"):
        if not callable(getattr(job, name)):
            raise UserError(f"Job.{name} must be callable, got {type(getattr(job, name)).__name__}")
    for name in ("lr_scheduler", "collate_fn"):
        value = getattr(job, name)
        if value is not None and not callable(value):
            raise UserError(f"Job.{name} must be callable or None, got {type(value).__name__}")
    module = _torch_class("nn.Module")
    if module is not None and isinstance(job.model, module):  # a module is callable too
        raise UserError(
            f"Job.model must be a factory that builds the model (e.g. lambda: MyNet()), "
            f"got a {type(job.model).__name__} instance"
        )


def _check_dataset(dataset: Any, micro_batch_size: int) -> None:
    iterable = _torch_class("utils.data.IterableDataset")
    if iterable is not None and isinstance(dataset, iterable):
        raise UserError(
            "Job.dataset is an IterableDataset, which shoal does not support: it reads each "
            "micro-batch's samples by index (use a map-style dataset: __len__ and __getitem__)"
        )
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise UserError(
            f"Job.dataset must be map-style (define __len__ and __getitem__), "
            f"got {type(dataset).__name__}"
        )
    if len(dataset) < micro_batch_size:
        raise UserError(
            f"Job.dataset has {len(dataset)} samples, fewer than one micro-batch "
            f"({micro_batch_size})"
        )


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


def _check_clip(value: Any) -> None:
    if value is not None and not (_is_real(value) and math.isfinite(value) and value > 0):
        raise UserError(
            f"Job.clip_grad_norm must be a positive number (the largest gradient norm) or None, "
            f"got {value!r}"
        )


AUTOCAST_DTYPES = (None, "float16", "bfloat16")
FLOAT32_LIMIT = 2.0**128  # the scale is a float32, as GradScaler's
# torch.amp.GradScaler's defaults: Job.loss_scale = "dynamic", or a dict that changes some
GRAD_SCALER = {
    "init_scale": 2.0**16,
    "growth_factor": 2.0,
    "backoff_factor": 0.5,
    "growth_interval": 2000,
}


def loss_scale_settings(value: Any) -> dict[str, Any] | None:
    """Job.loss_scale checked and spelled out: None (not scaled), or GradScaler's four settings
    and `dynamic` (False for a fixed scale, which is then `init_scale`)."""
    if value is None:
        return None
    if _is_real(value):
        _check_between("Job.loss_scale", value, 0, FLOAT32_LIMIT)
        return {**GRAD_SCALER, "init_scale": float(value), "dynamic": False}
    if isinstance(value, str) and value == "dynamic":
        return {**GRAD_SCALER, "dynamic": True}
    if not isinstance(value, dict):
        raise UserError(
            f"Job.loss_scale must be 'dynamic', a dict of GradScaler's settings, a positive "
            f"number or None, got {_shown(value)}"
        )
    unknown = sorted(str(k) for k in value if k not in GRAD_SCALER)
    if unknown:
        raise UserError(
            f"Job.loss_scale has unknown setting(s) {', '.join(unknown)} "
            f"(known: {', '.join(GRAD_SCALER)})"
        )
    settings = {**GRAD_SCALER, **value}
    for key, low, high in (
        ("init_scale", 0, FLOAT32_LIMIT),
        ("growth_factor", 1, FLOAT32_LIMIT),
        ("backoff_factor", 0, 1),
    ):
        _check_between(f"Job.loss_scale[{key!r}]", settings[key], low, high)
        settings[key] = float(settings[key])
    interval = settings["growth_interval"]
    if not _is_int(interval) or interval < 1:
        raise UserError(
            f"Job.loss_scale['growth_interval'] must be a positive integer, got {_shown(interval)}"
        )
    return {**settings, "dynamic": True}


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_between(name: str, value: Any, low: float, high: float) -> None:
    """A real number strictly between `low` and `high` (NaN is not; a float32 scale stays
    below 2**128, and an integer past a float's range is out of range, not an overflow)."""
    if not (_is_real(value) and low < value < high):
        shown = "2**128 (a float32)" if high == FLOAT32_LIMIT else high
        raise UserError(
            f"{name} must be a number above {low} and below {shown}, got {_shown(value)}"
        )


def _shown(value: Any) -> str:
    """`value` for a one-line message: an integer too long to print by its size, anything
    else's repr cut at 60 characters."""
    if _is_int(value) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def load_job_file(path: str | pathlib.Path) -> Callable[..., Job]:
    """Import a job file and return its `make_job`. Its directory goes first on sys.path, as
    `python job.py` puts it, so that the job can import the modules beside it."""
    path = pathlib.Path(path)
    try:
        found = path.is_file()
    except OSError as exc:  # a name too long: blamed on shoal's own line as a code error
        raise UserError(f"job file {str(path)!r}: {unreadable(exc)}") from None
    if not found:
        why = "is not a file" if path.exists() else "does not exist"
        raise UserError(f"job file {str(path)!r} {why}")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"shoal_job_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # no loader for its suffix (job.txt)
        raise UserError(f"cannot import job file {str(path)!r}: not a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _same_draws()
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        if exc.filename is not None:
            raise
        # null bytes: compile() names no file, so the error's line was shoal's own (job.py)
        raise UserError(f"job file {str(path)!r} is not Python source ({exc.msg})") from exc
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


def parse_options(items: list[str], flag: str = "-o") -> dict[str, Any]:
    """Parse ``key=value`` pairs; values are Python literals when they parse, else strings. A
    number literal past a float's range (1e400, which Python reads as inf) is refused, naming
    the item after `flag`; the words inf and nan are no literals: they stay strings."""
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
            continue
        if not _finite(options[key]):
            shown = item if len(item) <= 60 else f"{item[:57]}..."
            raise UserError(f"{flag} {shown}: a number out of range (a float's limit is 1.8e308)")
    return options


def _finite(value: Any) -> bool:
    """No number in `value` (or in the containers it nests) is infinite or NaN."""
    if isinstance(value, float | complex):
        return all(math.isfinite(x) for x in (value.real, value.imag))
    if isinstance(value, dict):
        return all(_finite(k) and _finite(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return all(_finite(v) for v in value)
    return True
