"""`slapo.framework_dialect`: how a scheduled model is handed to a training framework.

A dialect is a class or function registered for a (target, framework) pair, e.g. the pipeline
stage wrapper and the pipeline engine of ``"pipeline"`` (`torch.distributed.pipelining`);
`build(sch, target=...)` looks its engine up here. Slapo's DeepSpeed dialect is absent: DeepSpeed
is not a dependency and cannot be tested on this project's CPU machines.
"""

from . import pipeline
from .registry import get_all_dialects, get_dialect_cls, register_framework_dialect

__all__ = ["get_all_dialects", "get_dialect_cls", "pipeline", "register_framework_dialect"]
