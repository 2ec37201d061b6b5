"""The dialect registry: ``(target, framework) -> class or function``, filled by decorators.

`target` says what the dialect is for (``"pipeline_stage"``, ``"pipeline_engine"``, ...),
`framework` which framework it speaks to (``"pipeline"`` = `torch.distributed.pipelining`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ScheduleError

_DIALECTS: dict[str, dict[str, Any]] = {}


def register_framework_dialect(framework: str, target: str) -> Callable[[Any], Any]:
    """Decorator: register the class or function as `framework`'s dialect for `target`."""

    def register(obj: Any) -> Any:
        table = _DIALECTS.setdefault(target, {})
        if framework in table:
            raise ValueError(f"{target} dialect for {framework!r} is already registered")
        table[framework] = obj
        return obj

    return register


def get_dialect_cls(target: str, framework: str | None, allow_none: bool = False) -> Any:
    """The dialect registered for (`target`, `framework`); with `allow_none`, a missing
    framework (``None`` or unregistered) gives ``None`` instead of an error."""
    found = _DIALECTS.get(target, {}).get(framework) if framework is not None else None
    if found is None and not allow_none:
        known = sorted(_DIALECTS.get(target, {}))
        raise ScheduleError(f"no {target} dialect for framework {framework!r}; known: {known}")
    return found


def get_all_dialects() -> dict[str, dict[str, Any]]:
    """A copy of the registry: target -> framework -> dialect."""
    return {target: dict(table) for target, table in _DIALECTS.items()}
