"""The built-in schedule primitives, one module each; importing this package registers them."""

from . import (  # noqa: F401  (imported for registration)
    annotate,
    checkpoint,
    cut_pipeline_stage,
    decompose,
    fork_rng,
    fuse,
    replace,
    replace_all,
    shard,
    sync,
)
from .base import PRIMITIVES, Primitive, list_primitives, register_primitive

__all__ = ["PRIMITIVES", "Primitive", "list_primitives", "register_primitive"]
