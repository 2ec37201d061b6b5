"""Argument types the bench scripts share: argparse `type=` functions, so that a bad value is a
usage error (exit 2) before any work starts. No torch here: the simulator benches import it.

Usage: `p.add_argument("--seeds", type=seeds, default="0,1,2")`.
"""

from __future__ import annotations

import argparse
import math
import pathlib
from collections.abc import Callable, Iterable


def names(known: Iterable[str], what: str) -> Callable[[str], list[str]]:
    """A comma list of names from `known`; `what` names one in the error ("policy")."""
    known = tuple(known)

    def parse(text: str) -> list[str]:
        items = text.split(",")
        unknown = [n for n in items if n not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {unknown[0]!r} (known: {', '.join(known)})"
            )
        return items

    return parse


def numbers(convert: type, ok: Callable[[float], bool], what: str) -> Callable[[str], list]:
    """A comma list of numbers, each `convert`ed (int or float) and accepted by `ok`; blank
    items are skipped and none at all is an error. `what` describes one ("a seed ...")."""

    def parse(text: str) -> list:
        values = []
        for item in (s.strip() for s in text.split(",")):
            if not item:
                continue
            try:
                value = convert(item)
            except ValueError:
                value = None
            if value is None or not ok(value):
                raise argparse.ArgumentTypeError(f"not {what}: {item!r}")
            values.append(value)
        if not values:
            raise argparse.ArgumentTypeError(f"no value in {text!r}: a comma list, each {what}")
        return values

    return parse


seeds = numbers(int, lambda v: v >= 0, "a seed (a whole number >= 0)")
rates = numbers(float, lambda v: 0 < v < math.inf, "a rate in Mbit/s above 0")
ratios = numbers(float, lambda v: 0 <= v <= 1, "a ratio from 0 to 1")
sizes = numbers(int, lambda v: v >= 1, "a batch size (a whole number >= 1)")


def span(text: str) -> list[int]:
    """N or LO-HI (1 <= LO <= HI) as the numbers in it; 0 or nothing: none."""
    if text in ("", "0"):
        return []
    lo, _, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi or lo)
    except ValueError:
        first, last = 0, -1
    if not 1 <= first <= last:
        raise argparse.ArgumentTypeError(f"not N or LO-HI: {text!r}")
    return list(range(first, last + 1))


def workers(text: str) -> str:
    """The emulated workers' kinds, as `shoal run --workers` takes them (needs shoal on the
    path: the scripts that use it put `src/` there)."""
    from shoal.errors import UserError
    from shoal.perf.devices import load_devices

    try:
        load_devices().parse_workers(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def check_out_dir(p: argparse.ArgumentParser, flag: str, path: object) -> None:
    """`path` (None: none given) is a directory to write into, or does not exist yet."""
    if path and pathlib.Path(path).exists() and not pathlib.Path(path).is_dir():
        p.error(f"{flag}: {path} is not a directory")


def check_out_file(p: argparse.ArgumentParser, flag: str, path: object) -> None:
    """`path` (None: none given) is a file to write, in a directory that exists."""
    if not path:
        return
    if pathlib.Path(path).is_dir():
        p.error(f"{flag}: {path} is a directory")
    if not pathlib.Path(path).parent.is_dir():
        p.error(f"{flag}: no directory {str(pathlib.Path(path).parent)!r} to write into")
