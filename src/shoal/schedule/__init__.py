"""shoal's Slapo-compatible schedule language: ``import shoal.schedule as slapo``.

Programs written for Slapo run unchanged: `create_schedule` wraps a model in a `Schedule` tree,
primitives (`shard`, `sync`, `checkpoint`, `replace`, `fuse`, ...) edit it in place, and `build`
returns the optimized model. Everything runs on CPU (gloo) as well as on GPUs; see
docs/schedule.md for what maps onto which PyTorch 2.x piece.
"""

from . import (
    framework_dialect,
    hooks,
    model_schedule,
    op,
    pattern,
    pipeline,
    primitives,
    random,
    sharding,
    utils,
)
from .build import build, consolidate_model, init_empty_weights
from .checkpoint import CheckPointWrapper, checkpoint
from .errors import ScheduleError, SchedulePathError, VerificationError
from .logger import get_logger
from .pattern import ModulePattern, Pattern, call_module
from .primitives.base import Primitive, list_primitives, register_primitive
from .random import get_cuda_rng_tracker, get_rng_tracker, is_random_seed_set, set_random_seed
from .schedule import Schedule, create_schedule
from .verify import Verify

__all__ = [
    "CheckPointWrapper",
    "ModulePattern",
    "Pattern",
    "Primitive",
    "Schedule",
    "ScheduleError",
    "SchedulePathError",
    "VerificationError",
    "Verify",
    "build",
    "consolidate_model",
    "framework_dialect",
    "model_schedule",
    "utils",
    "get_logger",
    "init_empty_weights",
    "pipeline",
    "call_module",
    "checkpoint",
    "create_schedule",
    "get_cuda_rng_tracker",
    "get_rng_tracker",
    "hooks",
    "is_random_seed_set",
    "list_primitives",
    "op",
    "pattern",
    "primitives",
    "random",
    "register_primitive",
    "set_random_seed",
    "sharding",
]
