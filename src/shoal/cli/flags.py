"""Command-line flags generated from the configuration dataclasses in `shoal.config`.

A flag is defined once, as a field's metadata; `add_flags` turns the fields of a dataclass
(nested ones included, e.g. RunConfig.checkpoint) into argparse options and `from_args` builds
the dataclass back from the parsed namespace. A command that reads a flag differently (`shoal
run` takes `--resume DIR`, the torchrun entry a switch) passes an override for it, so argparse
never needs editing after the fact.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
from typing import Any

from shoal.digits import ascii_digits
from shoal.errors import UserError


def _ascii_number(text: str, parse: type[int] | type[float]) -> int | float:
    """`parse(text)` without the digits of other scripts (int('２') is 2), or argparse's error."""
    name = parse.__name__
    try:
        return parse(ascii_digits(text))
    except ValueError as exc:
        why = f" ({exc})" if not text.isascii() else ""
        raise argparse.ArgumentTypeError(f"invalid {name} value: {text!r}{why}") from None


def ascii_int(text: str) -> int:
    """An integer flag's value, in ASCII digits."""
    return int(_ascii_number(text, int))


def ascii_float(text: str) -> float:
    """A float flag's value, in ASCII digits, and finite: 'nan', 'inf' and '1e400' (which
    float() reads as inf) are no number of seconds."""
    value = float(_ascii_number(text, float))
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r} (a finite number)")
    return value


def nonempty(value: str) -> str:
    """A text flag's value, not empty: '' was taken as the flag left out (`--spot-trace ''`
    ran without a trace, `--batch-policy ''` with the job's policy)."""
    if not value:
        raise argparse.ArgumentTypeError(f"expected a value, got {value!r}")
    return value


def nonempty_path(value: str) -> pathlib.Path:
    """A path flag's value, not empty: Path('') is the current directory (`--out ''` wrote
    there)."""
    return pathlib.Path(nonempty(value))


_TYPES = {"int": ascii_int, "float": ascii_float, "str": nonempty}


class RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a UserError, which its caller tells in one line with
    exit code 2: the torchrun worker's flags, where argparse printed its whole usage first."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(message)


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, unless its text already says it or there is
    none to show (None, False, an empty list): `--peer-timeout SECONDS ... (default: 30.0)`."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        none = default is None or default is False or default == [] or default == argparse.SUPPRESS
        if "default" in text or none:  # (not `default in (None, False)`: 0 == False)
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return f"{text} (default: %(default)s)"
        return text


def _dest(prefix: str, f: dataclasses.Field) -> str:
    return f"{prefix}{f.name}"


def _nested(f: dataclasses.Field) -> bool:
    return not f.metadata and f.default_factory is not dataclasses.MISSING


def _option(f: dataclasses.Field, dest: str) -> tuple[list[str], dict[str, Any]]:
    meta = dict(f.metadata)
    flag, short = meta.pop("flag"), meta.pop("short", None)
    kind = str(f.type).replace(" | None", "")
    kwargs: dict[str, Any] = {"help": meta.pop("help"), **meta}
    if not flag.startswith("-"):  # a positional argument
        return [flag], {**kwargs, "type": _TYPES[kind]}
    kwargs["dest"] = dest
    if kind == "bool":
        kwargs["action"] = "store_true"
    elif kind.startswith("tuple"):
        kwargs.update(action="append", default=[])
    else:
        kwargs["type"] = _TYPES[kind]
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
    return [short, flag] if short else [flag], kwargs


def add_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    overrides: dict[str, dict[str, Any]] | None = None,
    prefix: str = "",
) -> None:
    """Add one option per field of the dataclass `cls` that has a flag (recursing into nested
    configuration dataclasses); `overrides` maps a flag to argparse keywords that replace the
    generated ones for this command."""
    overrides = overrides or {}
    for f in dataclasses.fields(cls):
        if _nested(f):
            add_flags(parser, f.default_factory, overrides, f"{prefix}{f.name}_")
        elif "flag" in f.metadata:
            names, kwargs = _option(f, _dest(prefix, f))
            kwargs.update(overrides.get(f.metadata["flag"], {}))
            parser.add_argument(*names, **kwargs)


def from_args(cls: type, args: argparse.Namespace, prefix: str = "", **given: Any):
    """Build `cls` from parsed flags; `given` supplies (or replaces) top-level fields."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
        elif _nested(f):
            values[f.name] = from_args(f.default_factory, args, f"{prefix}{f.name}_")
        elif "flag" in f.metadata:
            values[f.name] = getattr(args, _dest(prefix, f))
    return cls(**values)
