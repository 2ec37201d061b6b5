"""The two files of a run directory: their names, the `result.json` summary, and reading both.

A line of `metrics.jsonl` becomes the record of its `"kind"` (`Record`); lines of an unknown kind
are skipped, so a newer runtime can add kinds without breaking old readers. A run killed
mid-write leaves a last line without its newline: readers skip it when it does not parse.
Anything else malformed raises `UserError` naming the file and line, e.g.
`run/metrics.jsonl line 7: ...`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.errors import UserError, unreadable
from shoal.json_input import loads
from shoal.metrics.cost import CostLine, LeaseLine
from shoal.metrics.fields import Fields, drop_none
from shoal.metrics.training import MembershipEvent, StepLine

METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
SCENARIO_FILE = "scenario.json"  # a provider run's measured scenario (`launcher.autoscale`)

Record = StepLine | MembershipEvent | LeaseLine | CostLine


@dataclass(frozen=True)
class RunResult:
    """The summary `shoal run` writes when it finishes."""

    final_step: int | None = None
    state_sha256: str | None = None
    wall_time_s: float | None = None
    samples_per_s: float | None = None
    consistency: str | None = None
    workers: tuple[str, ...] = ()  # device kinds of the final group, in rank order
    checkpoint: str | None = None
    fingerprint: str | None = None
    nonfinite_skipped: int | None = None  # steps dropped by --on-nonfinite skip
    # Job.loss_scale set: the scale the next step would use, and how often it backed off
    loss_scale: float | None = None
    loss_scale_backoffs: int | None = None
    # bought from a provider: {"usd", "by_kind", "by_tier", "revocations"}
    cost: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = drop_none(self)
        out["workers"] = list(self.workers)
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = RESULT_FILE) -> RunResult:
        if not isinstance(obj, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        f = Fields(obj, where)
        return cls(
            final_step=f.int_("final_step"),
            state_sha256=f.str_("state_sha256"),
            wall_time_s=f.float_("wall_time_s"),
            samples_per_s=f.float_("samples_per_s"),
            consistency=f.str_("consistency"),
            workers=tuple(str(w) for w in f.list_("workers")),
            checkpoint=f.str_("checkpoint"),
            fingerprint=f.str_("fingerprint"),
            nonfinite_skipped=f.int_("nonfinite_skipped"),
            loss_scale=f.float_("loss_scale"),
            loss_scale_backoffs=f.int_("loss_scale_backoffs"),
            cost=_cost_block(f),
        )


def _cost_block(f: Fields) -> dict[str, Any] | None:
    value = f.obj.get("cost")
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("usd"), int | float):
        raise f.fail(f"'cost' must be an object with 'usd', got {value!r}")
    return value


def parse_line(line: str, where: str) -> Record | None:
    """One line of a metrics file; None for a blank line or a kind this version does not know."""
    if not line.strip():
        return None
    try:
        obj = loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # nested too deeply, an integer of thousands of digits
        raise UserError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    kind = Fields(obj, where).str_("kind", required=True)
    if kind == "step":
        return StepLine.from_json(obj, where)
    if kind == "membership":
        return MembershipEvent.from_json(obj, where)
    if kind == "lease":
        return LeaseLine.from_json(obj, where)
    if kind == "cost":
        return CostLine.from_json(obj, where)
    return None


def parse_metrics_bytes(data: bytes, name: str) -> Iterator[Record]:
    """The records of a metrics file's contents; `name` prefixes errors (`name line N: ...`).

    The text after the last newline is a line cut off by a crash mid-write when it does not
    parse: it is skipped rather than failing the whole file.
    """
    cut = data.rfind(b"\n") + 1
    try:
        # split on "\n" only: str.splitlines would also break inside strings at U+2028 etc.
        lines = data[:cut].decode("utf-8").split("\n")[:-1]
    except UnicodeDecodeError:
        raise UserError(f"{name}: not UTF-8 text") from None
    for number, line in enumerate(lines, start=1):
        record = parse_line(line, f"{name} line {number}")
        if record is not None:
            yield record
    tail = data[cut:].decode("utf-8", errors="replace")
    try:
        record = parse_line(tail, f"{name} line {len(lines) + 1}")
    except UserError:
        return  # truncated mid-write
    if record is not None:
        yield record


def read_metrics(path: str | Path) -> Iterator[Record]:
    """The records of a metrics file, in file order (see `parse_metrics_bytes`)."""
    path = Path(path)
    yield from parse_metrics_bytes(path.read_bytes(), str(path))


def read_result(path: str | Path) -> RunResult | None:
    """The result file, or None when the run wrote none (crashed or still running)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        obj = loads(path.read_text(encoding="utf-8"), float_ints=True)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: {unreadable(exc)}") from None
    except ValueError as exc:  # nested too deeply, an integer no float holds
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    return RunResult.from_json(obj, str(path))
