"""`sch.fork_rng()`: run the module on the model-parallel RNG stream.

Used for dropout on tensor-parallel activations, where each rank must draw a different mask.
The module's forward is wrapped in `get_cuda_rng_tracker().fork()` (CPU and GPU alike) and the
module becomes an fx leaf (``traceable = False``). Without `set_random_seed(..., tp_rank=...)`
there is no stream to fork and the module runs on the default stream.
"""

from __future__ import annotations

import types
from typing import Any

from ..random import MODEL_PARALLEL_RNG, get_cuda_rng_tracker
from .base import Primitive, register_primitive


def _forward_on_tp_stream(self: Any, *args: Any, **kwargs: Any) -> Any:
    tracker = get_cuda_rng_tracker()
    if MODEL_PARALLEL_RNG not in tracker.states:
        return type(self).forward(self, *args, **kwargs)
    with tracker.fork(MODEL_PARALLEL_RNG):
        return type(self).forward(self, *args, **kwargs)


@register_primitive()
class ForkRNGPrimitive(Primitive):
    @staticmethod
    def name() -> str:
        return "fork_rng"

    @staticmethod
    def apply(sch: Any) -> None:
        # a bound method (not a closure) so deepcopy/Verify keep working
        sch.mod.forward = types.MethodType(_forward_on_tp_stream, sch.mod)
        sch.mod.traceable = False
