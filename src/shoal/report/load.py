"""Reading a run directory: `metrics.jsonl` and `result.json` into typed, validated records.

This module owns the on-disk format that `shoal run` writes and `shoal report` reads. Each line
of `metrics.jsonl` is one JSON object with a `"kind"`: `"step"` (one completed training step) or
`"membership"` (a join, leave, failure or recovery). Only the keys that identify a record are
required; the rest are optional so that older or partial runs still render. Lines of an unknown
kind are skipped, so the runtime can add kinds without breaking old reports. Anything else that
is wrong raises `UserError` naming the file and line, e.g. `run/metrics.jsonl line 7: ...`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shoal.errors import UserError

METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
EVENT_KINDS = ("join", "leave", "fail", "recover")


@dataclass(frozen=True)
class WorkerStep:
    """One worker's part of one step."""

    id: str
    rank: int | None = None
    device: str | None = None
    micro_batches: int = 0
    micro_batch_time_s: float | None = None


@dataclass(frozen=True)
class Step:
    """One completed training step."""

    step: int
    loss: float | None = None
    global_batch_size: int | None = None
    micro_batch_size: int | None = None
    step_time_s: float | None = None
    samples_per_s: float | None = None
    wall_time_s: float | None = None
    workers: tuple[WorkerStep, ...] = ()


@dataclass(frozen=True)
class MembershipEvent:
    """A worker joined, left gracefully, failed abruptly, or the job recovered from a change."""

    event: str
    worker: str
    device: str | None = None
    step: int | None = None
    wall_time_s: float | None = None
    recovery_time_s: float | None = None
    lost_steps: int | None = None
    detail: str | None = None


@dataclass(frozen=True)
class RunResult:
    """The summary `shoal run` writes when it finishes."""

    final_step: int | None = None
    state_sha256: str | None = None
    wall_time_s: float | None = None
    samples_per_s: float | None = None
    consistency: str | None = None
    workers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Run:
    """Everything a report shows, in file order."""

    directory: Path
    steps: tuple[Step, ...]
    events: tuple[MembershipEvent, ...]
    result: RunResult | None  # None when the run wrote no result.json (crashed or still running)


class _Fields:
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
        return int(value)

    def float_(self, key: str, required: bool = False) -> float | None:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"'{key}' must be a number, got {value!r}")
        return float(value)

    def str_(self, key: str, required: bool = False) -> str | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(f"'{key}' must be a string, got {value!r}")
        return value


def _parse_worker(raw: Any, where: str, index: int) -> WorkerStep:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: workers[{index}] must be an object, got {raw!r}")
    f = _Fields(raw, f"{where}: workers[{index}]")
    micro_batches = f.int_("micro_batches") or 0
    if micro_batches < 0:
        raise f.fail(f"'micro_batches' must be >= 0, got {micro_batches}")
    return WorkerStep(
        id=f.str_("id", required=True) or "",
        rank=f.int_("rank"),
        device=f.str_("device"),
        micro_batches=micro_batches,
        micro_batch_time_s=f.float_("micro_batch_time_s"),
    )


def _parse_step(f: _Fields) -> Step:
    raw_workers = f.obj.get("workers") or []
    if not isinstance(raw_workers, list):
        raise f.fail(f"'workers' must be a list, got {raw_workers!r}")
    loss = f.float_("loss")
    return Step(
        step=f.int_("step", required=True) or 0,
        # A diverged run logs NaN/inf; keep the step but leave its loss out of the curve.
        loss=loss if loss is not None and math.isfinite(loss) else None,
        global_batch_size=f.int_("global_batch_size"),
        micro_batch_size=f.int_("micro_batch_size"),
        step_time_s=f.float_("step_time_s"),
        samples_per_s=f.float_("samples_per_s"),
        wall_time_s=f.float_("wall_time_s"),
        workers=tuple(_parse_worker(w, f.where, i) for i, w in enumerate(raw_workers)),
    )


def _parse_event(f: _Fields) -> MembershipEvent:
    event = f.str_("event", required=True)
    if event not in EVENT_KINDS:
        raise f.fail(f"'event' must be one of {', '.join(EVENT_KINDS)}; got {event!r}")
    return MembershipEvent(
        event=event,
        worker=f.str_("worker", required=True) or "",
        device=f.str_("device"),
        step=f.int_("step"),
        wall_time_s=f.float_("wall_time_s"),
        recovery_time_s=f.float_("recovery_time_s"),
        lost_steps=f.int_("lost_steps"),
        detail=f.str_("detail"),
    )


def parse_metrics(
    lines: list[str], name: str
) -> tuple[tuple[Step, ...], tuple[MembershipEvent, ...]]:
    """Parse the lines of a metrics file; `name` prefixes error messages (`name line N: ...`).

    `shoal run --resume` appends to the file from a new process whose clock starts at 0 again.
    A step whose wall time is below the previous step's marks such a restart: it and every
    later record are shifted by the time reached before it, so wall time stays monotonic.
    """
    steps: list[Step] = []
    events: list[MembershipEvent] = []
    offset = 0.0
    last_step_wall: float | None = None  # after shifting
    for number, line in enumerate(lines, start=1):
        where = f"{name} line {number}"
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        f = _Fields(obj, where)
        kind = f.str_("kind", required=True)
        if kind == "step":
            step = _parse_step(f)
            if step.wall_time_s is not None:
                if last_step_wall is not None and step.wall_time_s + offset < last_step_wall:
                    offset = last_step_wall
                step = replace(step, wall_time_s=step.wall_time_s + offset)
                last_step_wall = step.wall_time_s
            steps.append(step)
        elif kind == "membership":
            event = _parse_event(f)
            if event.wall_time_s is not None and offset:
                event = replace(event, wall_time_s=event.wall_time_s + offset)
            events.append(event)
        # other kinds: written by a newer runtime; nothing in the report depends on them
    return tuple(steps), tuple(events)


def _load_result(path: Path) -> RunResult | None:
    if not path.is_file():
        return None
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    if not isinstance(obj, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    f = _Fields(obj, str(path))
    workers = obj.get("workers") or []
    if not isinstance(workers, list):
        raise f.fail(f"'workers' must be a list, got {workers!r}")
    return RunResult(
        final_step=f.int_("final_step"),
        state_sha256=f.str_("state_sha256"),
        wall_time_s=f.float_("wall_time_s"),
        samples_per_s=f.float_("samples_per_s"),
        consistency=f.str_("consistency"),
        workers=tuple(str(w) for w in workers),
    )


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
        # split on "\n" only: str.splitlines would also break inside strings at U+2028 etc.
        lines = metrics.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError:
        raise UserError(f"{metrics}: not UTF-8 text") from None
    steps, events = parse_metrics(lines, str(metrics))
    return Run(
        directory=directory,
        steps=steps,
        events=events,
        result=_load_result(directory / RESULT_FILE),
    )
