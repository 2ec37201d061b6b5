"""The field helpers every configuration class uses: a flag's metadata and a bound check."""

from __future__ import annotations

from shoal.errors import UserError


def option(flag: str, help: str, **extra) -> dict:
    """A field's metadata: `shoal.cli.flags` makes it the argparse option `flag`."""
    return {"flag": flag, "help": help, **extra}


def at_least(value: float | None, low: float, flag: str) -> None:
    if value is not None and not value >= low:  # `not >=` also refuses NaN
        raise UserError(f"{flag} must be >= {low:g}, got {value}")
