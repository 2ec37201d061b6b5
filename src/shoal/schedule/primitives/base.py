"""The primitive registry: what `sch.<name>(...)` dispatches to.

A primitive is a class with a `name()`, an `apply(sch, ...)` and optional per-schedule metadata
(`init_metadata()`); `register_primitive()` adds it to the registry and every `Schedule` then
exposes it as a bound method. The built-in primitives live one per file next to this one.
"""

from __future__ import annotations

from typing import Any

PRIMITIVES: dict[str, type[Primitive]] = {}


class Primitive:
    """Base class of schedule primitives (subclass it and decorate with `register_primitive`)."""

    @staticmethod
    def name() -> str:
        raise NotImplementedError

    @staticmethod
    def apply(sch: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def init_metadata() -> Any:
        """Per-schedule state kept in ``sch.metadata.primitives[name]`` (None if stateless)."""
        return None

    @staticmethod
    def is_verifiable() -> bool:
        """Whether `Verify` can check this primitive numerically."""
        return False


def register_primitive():
    """Class decorator adding a `Primitive` subclass to the registry under its `name()`."""

    def wrap(cls: type[Primitive]) -> type[Primitive]:
        PRIMITIVES[cls.name()] = cls
        return cls

    return wrap


def list_primitives(name_only: bool = True) -> list[str] | dict[str, type[Primitive]]:
    """The registered primitives: their names, or a name -> class dict."""
    return sorted(PRIMITIVES) if name_only else dict(PRIMITIVES)
