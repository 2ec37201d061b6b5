"""Numbers in a user's text are written in ASCII digits.

int() and float() read the digits of every script ('２' is 2, '０.5' is 0.5, '１６' is 16), so a
spec or a file cell written with them was taken as a number its author may never have meant.
Each parser of a user's number reads its text through `ascii_digits` first.
"""

from __future__ import annotations


def ascii_digits(text: str) -> str:
    """`text` itself when it is ASCII, else a ValueError, as int() and float() raise on text
    that is no number."""
    if not text.isascii():
        raise ValueError("ASCII digits only")
    return text
