"""JSON read from a user's file: every refusal a `ValueError`, for the caller to name the file.

`json.loads` raises `JSONDecodeError` for bad syntax, but a `RecursionError` (a traceback) for
arrays nested some thousands deep and a bare `ValueError` about `sys.set_int_max_str_digits`
for an integer of more than 4,300 digits. `loads` turns both into a `ValueError` in plain words
and, with `float_ints`, refuses an integer that no float can hold (10^400: an `OverflowError`
wherever the value is then used as a number of seconds, dollars or samples); with `finite`, a
number literal past a float's range (1e400, which Python reads as inf; the words Infinity and
NaN are still taken).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

# the most digits of an integer a float can hold (sys.float_info.max is about 1.8e308)
_FLOAT_DIGITS = len(str(int(sys.float_info.max)))


class _Refused(ValueError):
    """A number refused in this module's own words."""


def _float_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _FLOAT_DIGITS or abs(value := int(text)) > sys.float_info.max:
        raise _Refused(f"an integer of {digits:,} digits, too large for a number")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused("a number out of range (a float's limit is 1.8e308)")
    return value


def loads(text: str, *, float_ints: bool = False, finite: bool = False) -> Any:
    """`json.loads(text)`; a ValueError (JSONDecodeError for bad syntax) when it is refused."""
    hooks: dict[str, Any] = {}
    if float_ints:
        hooks["parse_int"] = _float_int
    if finite:
        hooks["parse_float"] = _finite_float
    try:
        return json.loads(text, **hooks)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (json.JSONDecodeError, _Refused):
        raise
    except ValueError as exc:
        raise ValueError("an integer of more than 4,300 digits") from exc
