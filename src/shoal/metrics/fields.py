"""Typed access to the fields of one JSON record, shared by every record type of the schema.

`Fields` reads one key as an int, float, string, bool or list, and names the file, line and key
in the `UserError` when the value is missing (if required) or of the wrong type. `drop_none` is
what every `to_json` starts from: the record's fields as a dict, without the unknown ones.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from shoal.errors import UserError

# the largest integer a record holds: what a 64-bit counter does (steps, bytes, a rank)
MAX_INT = 2**63 - 1
# the largest wall time a record holds, in seconds (31,700 years): no clock's reading is past
# it, and near the float limit (1e308) the report's time axes overflowed (a traceback, or
# matplotlib's "arange: cannot compute length" as the error)
MAX_WALL_S = 1e12


def drop_none(obj: Any) -> dict[str, Any]:
    """The record's fields as a dict, without the unknown (None) ones: old files lack them too."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if getattr(obj, f.name) is not None}


class Fields:
    """Typed access to one JSON object; errors carry the location prefix (`file line N`)."""

    def __init__(self, obj: dict[str, Any], where: str) -> None:
        self.obj = obj
        self.where = where

    def fail(self, message: str) -> UserError:
        return UserError(f"{self.where}: {message}")

    def _get(self, key: str, required: bool) -> Any:
        value = self.obj.get(key)
        if value is None and required:
            raise self.fail(f"missing required key '{key}'")
        return value

    def int_(self, key: str, required: bool = False) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        # JSON true/false decode to bool, a subclass of int: reject them explicitly.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"'{key}' must be an integer, got {value!r}")
        if isinstance(value, float) and not value.is_integer():
            raise self.fail(f"'{key}' must be an integer, got {value!r}")
        if not -MAX_INT <= value <= MAX_INT:  # 10^29 steps: an OverflowError in the plots
            digits = len(str(abs(int(value))))
            raise self.fail(f"'{key}' must be an integer of at most 64 bits, got {digits} digits")
        return int(value)

    def float_(self, key: str, required: bool = False, wall: bool = False) -> float | None:
        """A number; with `wall`, a wall time the plots put on an axis: finite, and at most
        MAX_WALL_S from 0."""
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"'{key}' must be a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an integer such as 10^400: no float holds it
            digits = len(str(abs(value)))
            raise self.fail(f"'{key}' is too large a number ({digits:,} digits)") from None
        if wall and not math.isfinite(number):
            raise self.fail(f"'{key}' must be a finite number, got {value!r}")
        if wall and abs(number) > MAX_WALL_S:
            limit = f"{MAX_WALL_S:g}"
            raise self.fail(f"'{key}' must be from -{limit} to {limit} seconds, got {value!r}")
        return number

    def str_(self, key: str, required: bool = False) -> str | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(f"'{key}' must be a string, got {value!r}")
        return value

    def bool_(self, key: str) -> bool | None:
        value = self.obj.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.fail(f"'{key}' must be true or false, got {value!r}")
        return value

    def list_(self, key: str) -> list[Any]:
        value = self.obj.get(key) or []
        if not isinstance(value, list):
            raise self.fail(f"'{key}' must be a list, got {value!r}")
        return value
