"""Reading a run directory for the report: `metrics.jsonl` and `result.json` into one `Run`.

The records themselves (their fields, validation and the file names) belong to `shoal.metrics`;
this module gathers them in file order and makes the wall time of a resumed run monotonic.
Errors are `UserError`s naming the file and line, e.g. `run/metrics.jsonl line 7: ...`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from shoal.errors import UserError, unreadable
from shoal.metrics.cost import CostLine, LeaseLine
from shoal.metrics.files import (
    METRICS_FILE,
    RESULT_FILE,
    Record,
    RunResult,
    parse_metrics_bytes,
    read_result,
)
from shoal.metrics.training import MembershipEvent, StepLine

__all__ = ["MembershipEvent", "Run", "RunResult", "StepLine", "load_run"]


@dataclass(frozen=True)
class Run:
    """Everything a report shows, in file order."""

    directory: Path
    steps: tuple[StepLine, ...]
    events: tuple[MembershipEvent, ...]
    result: RunResult | None  # None when the run wrote no result.json (crashed or still running)
    # a run that bought its servers from a provider: lease opens/closes and cost lines
    leases: tuple[LeaseLine, ...] = ()
    costs: tuple[CostLine, ...] = ()


def split_records(
    records: Iterable[Record],
) -> tuple[tuple[StepLine, ...], tuple[MembershipEvent, ...]]:
    """Steps and events in file order, with wall time made monotonic across resumes.

    `shoal run --resume` appends to the file from a new process whose clock starts at 0 again.
    A step whose wall time is below the previous step's marks such a restart: it and every
    later record are shifted by the time reached before it.
    """
    steps: list[StepLine] = []
    events: list[MembershipEvent] = []
    offset = 0.0
    last_step_wall: float | None = None  # after shifting
    for record in records:
        if isinstance(record, LeaseLine | CostLine):
            continue  # not on the wall-time axis: `load_run` keeps them apart
        if isinstance(record, StepLine):
            step = record
            if step.loss is not None and not math.isfinite(step.loss):
                # A diverged run logs NaN/inf; keep the step but leave its loss out of the curve.
                step = replace(step, loss=None)
            if step.wall_time_s is not None:
                if last_step_wall is not None and step.wall_time_s + offset < last_step_wall:
                    offset = last_step_wall
                step = replace(step, wall_time_s=step.wall_time_s + offset)
                last_step_wall = step.wall_time_s
            steps.append(step)
        else:
            event = record
            if event.wall_time_s is not None and offset:
                event = replace(event, wall_time_s=event.wall_time_s + offset)
            events.append(event)
    return tuple(steps), tuple(events)


def load_run(directory: str | Path) -> Run:
    """Read and validate a run directory; raise `UserError` with a one-line message if it is bad."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: no such run directory")
    metrics = directory / METRICS_FILE
    if not metrics.is_file():
        raise UserError(
            f"{metrics}: not found (is {directory} a directory written by `shoal run`?)"
        )
    try:
        data = metrics.read_bytes()
    except OSError as exc:  # no permission, an I/O error: was a traceback
        raise UserError(f"{metrics}: {unreadable(exc)}") from None
    records = list(parse_metrics_bytes(data, str(metrics)))
    steps, events = split_records(records)
    return Run(
        directory=directory,
        steps=steps,
        events=events,
        result=read_result(directory / RESULT_FILE),
        leases=tuple(r for r in records if isinstance(r, LeaseLine)),
        costs=tuple(r for r in records if isinstance(r, CostLine)),
    )
