"""JSON read from a user's file: every refusal a `ValueError`, for the caller to name the file.

`json.loads` raises `JSONDecodeError` for bad syntax, but a `RecursionError` (a traceback) for
arrays nested some thousands deep and a bare `ValueError` about `sys.set_int_max_str_digits`
for an integer of more than 4,300 digits. `loads` turns both into a `ValueError` in plain words
and, with `float_ints`, refuses an integer that no float can hold (10^400: an `OverflowError`
wherever the value is then used as a number of seconds, dollars or samples).
"""

from __future__ import annotations

import json
import sys
from typing import Any

# the most digits of an integer a float can hold (sys.float_info.max is about 1.8e308)
_FLOAT_DIGITS = len(str(int(sys.float_info.max)))


def _float_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _FLOAT_DIGITS or abs(value := int(text)) > sys.float_info.max:
        raise ValueError(f"an integer of {digits:,} digits, too large for a number")
    return value


def loads(text: str, *, float_ints: bool = False) -> Any:
    """`json.loads(text)`; a ValueError (JSONDecodeError for bad syntax) when it is refused."""
    try:
        return json.loads(text, parse_int=_float_int) if float_ints else json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if float_ints:  # _float_int's own words
            raise
        raise ValueError("an integer of more than 4,300 digits") from exc
