"""The run's records on disk: the lines of `metrics.jsonl` and the `result.json` summary.

This module owns their schema; every writer (the step log of rank 0, the supervisor's membership
events) and every reader (the supervisor's progress, `shoal report`) goes through these types.
`metrics.jsonl` holds one JSON object per line with a `"kind"`: `"step"` (one completed training
step, with each worker's share), `"membership"` (join, leave, fail, notice, recover), and, for a
run buying its servers from a provider, `"lease"` (a server opened or closed) and `"cost"` (the
spend so far at each scaler decision). Only the
keys that identify a record are required; the rest are optional so that older or partial runs
still load, and `to_json` leaves out what is unknown. Lines of an unknown kind are skipped, so a
newer runtime can add kinds without breaking old readers. A run killed mid-write leaves a last
line without its newline: readers skip it when it does not parse. Anything else malformed raises
`UserError` naming the file and line, e.g. `run/metrics.jsonl line 7: ...`. Pure: no torch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from shoal.errors import UserError

METRICS_FILE = "metrics.jsonl"
RESULT_FILE = "result.json"
EVENT_KINDS = ("join", "leave", "fail", "notice", "stall", "recover")


def _drop_none(obj: Any) -> dict[str, Any]:
    """The record's fields as a dict, without the unknown (None) ones: old files lack them too."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if getattr(obj, f.name) is not None}


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


@dataclass(frozen=True)
class WorkerShare:
    """One worker's part of one step: its micro-batches and its seconds per micro-batch."""

    id: str
    rank: int | None = None
    device: str | None = None
    micro_batches: int = 0
    micro_batch_time_s: float | None = None  # None: it computed nothing this step

    def to_json(self) -> dict[str, Any]:
        out = _drop_none(self)
        if self.micro_batch_time_s is None:
            out["micro_batch_time_s"] = None  # written as today: the key is always there
        return out

    @classmethod
    def from_json(cls, raw: Any, where: str = "worker share") -> WorkerShare:
        if not isinstance(raw, dict):
            raise UserError(f"{where} must be an object, got {raw!r}")
        f = _Fields(raw, where)
        micro_batches = f.int_("micro_batches") or 0
        if micro_batches < 0:
            raise f.fail(f"'micro_batches' must be >= 0, got {micro_batches}")
        return cls(
            id=f.str_("id", required=True) or "",
            rank=f.int_("rank"),
            device=f.str_("device"),
            micro_batches=micro_batches,
            micro_batch_time_s=f.float_("micro_batch_time_s"),
        )


@dataclass(frozen=True)
class StepLine:
    """One completed training step, written by rank 0 of the group that computed it."""

    step: int
    loss: float | None = None
    global_batch_size: int | None = None
    micro_batch_size: int | None = None
    step_time_s: float | None = None
    samples_per_s: float | None = None
    wall_time_s: float | None = None  # since the run (this process of it) started
    redone: int | None = None  # exact-mode recomputations of the step (a bound overflowed)
    skipped: bool | None = None  # true: non-finite, its update skipped (--on-nonfinite skip)
    generation: int | None = None
    workers: tuple[WorkerShare, ...] = ()
    # adaptive batch (None when not measured): the smoothed gradient noise scale (samples),
    # the cosine between the step's two halves, the learning-rate factor applied to the step
    noise_scale: float | None = None
    similarity: float | None = None
    lr_factor: float | None = None
    # --compress (None otherwise): the keep ratio used, the measured link throughput, the
    # bytes one site put on its link and the seconds of the exchange across sites
    keep_ratio: float | None = None
    link_mbit_s: float | None = None
    sent_bytes: int | None = None
    exchange_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"kind": "step", **_drop_none(self)}
        out["workers"] = [w.to_json() for w in self.workers]
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "step line") -> StepLine:
        f = _Fields(obj, where)
        raw_workers = f.list_("workers")
        return cls(
            step=f.int_("step", required=True) or 0,
            loss=f.float_("loss"),
            global_batch_size=f.int_("global_batch_size"),
            micro_batch_size=f.int_("micro_batch_size"),
            step_time_s=f.float_("step_time_s"),
            samples_per_s=f.float_("samples_per_s"),
            wall_time_s=f.float_("wall_time_s"),
            redone=f.int_("redone"),
            skipped=f.bool_("skipped"),
            generation=f.int_("generation"),
            workers=tuple(
                WorkerShare.from_json(w, f"{where}: workers[{i}]")
                for i, w in enumerate(raw_workers)
            ),
            noise_scale=f.float_("noise_scale"),
            similarity=f.float_("similarity"),
            lr_factor=f.float_("lr_factor"),
            keep_ratio=f.float_("keep_ratio"),
            link_mbit_s=f.float_("link_mbit_s"),
            sent_bytes=f.int_("sent_bytes"),
            exchange_s=f.float_("exchange_s"),
        )


@dataclass(frozen=True)
class MembershipEvent:
    """A worker joined, got a notice, left gracefully, failed, or the group recovered.

    `step` is the steps completed when it took effect; a recover event also carries the time
    from the change to the first step of the new group and the steps of work lost.
    """

    event: str
    worker: str
    device: str | None = None
    step: int | None = None
    wall_time_s: float | None = None
    recovery_time_s: float | None = None
    lost_steps: int | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "membership", **_drop_none(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "membership line") -> MembershipEvent:
        f = _Fields(obj, where)
        event = f.str_("event", required=True)
        if event not in EVENT_KINDS:
            raise f.fail(f"'event' must be one of {', '.join(EVENT_KINDS)}; got {event!r}")
        return cls(
            event=event,
            worker=f.str_("worker", required=True) or "",
            device=f.str_("device"),
            step=f.int_("step"),
            wall_time_s=f.float_("wall_time_s"),
            recovery_time_s=f.float_("recovery_time_s"),
            lost_steps=f.int_("lost_steps"),
            detail=f.str_("detail"),
        )


@dataclass(frozen=True)
class LeaseLine:
    """A server bought from a provider was opened (requested: billing starts) or closed (released,
    revoked, or at the run's end: billing stops). Times `t_s` are emulated seconds since launch;
    a close carries the lease's charge, `usd`, so the ledger can be checked line by line."""

    action: str  # open | close
    server: str
    device: str | None = None
    tier: str | None = None  # on_demand | spot
    usd_per_hour: float | None = None
    t_s: float | None = None
    worker: str | None = None  # the worker it runs (None while it boots)
    cause: str | None = None  # close: released | revoked | end
    usd: float | None = None
    wall_time_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": "lease", **_drop_none(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "lease line") -> LeaseLine:
        f = _Fields(obj, where)
        action = f.str_("action", required=True)
        if action not in ("open", "close"):
            raise f.fail(f"'action' must be open or close; got {action!r}")
        return cls(
            action=action,
            server=f.str_("server", required=True) or "",
            device=f.str_("device"),
            tier=f.str_("tier"),
            usd_per_hour=f.float_("usd_per_hour"),
            t_s=f.float_("t_s"),
            worker=f.str_("worker"),
            cause=f.str_("cause"),
            usd=f.float_("usd"),
            wall_time_s=f.float_("wall_time_s"),
        )


def _numbers(f: _Fields, key: str) -> dict[str, float]:
    value = f.obj.get(key) or {}
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
    ):
        raise f.fail(f"'{key}' must be an object of numbers, got {value!r}")
    return {str(k): float(v) for k, v in value.items()}


@dataclass(frozen=True)
class CostLine:
    """The spend so far (USD, emulated time `t_s`) at a scaler decision and at the end: by
    device kind, the mix held ("kind:tier" -> servers), and the decision's projection;
    `over_budget` when the decision found no mix finishing within the --budget (the projection
    is then the cheapest mix's, and the run goes on at it), `past_deadline` when it found no
    mix finishing by the --deadline (the projection is then the fastest mix's)."""

    t_s: float
    usd: float
    by_kind: dict[str, float] = field(default_factory=dict)
    mix: dict[str, int] = field(default_factory=dict)
    projected_finish_s: float | None = None
    projected_usd: float | None = None
    wall_time_s: float | None = None
    over_budget: bool | None = None  # true: no mix finishes within the budget (else left out)
    past_deadline: bool | None = None  # true: no mix finishes by the deadline (else left out)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "cost", **_drop_none(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "cost line") -> CostLine:
        f = _Fields(obj, where)
        return cls(
            t_s=f.float_("t_s", required=True) or 0.0,
            usd=f.float_("usd", required=True) or 0.0,
            by_kind=_numbers(f, "by_kind"),
            mix={k: int(v) for k, v in _numbers(f, "mix").items()},
            projected_finish_s=f.float_("projected_finish_s"),
            projected_usd=f.float_("projected_usd"),
            wall_time_s=f.float_("wall_time_s"),
            over_budget=f.bool_("over_budget"),
            past_deadline=f.bool_("past_deadline"),
        )


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
    # bought from a provider: {"usd", "by_kind", "by_tier", "revocations"}
    cost: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = _drop_none(self)
        out["workers"] = list(self.workers)
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = RESULT_FILE) -> RunResult:
        if not isinstance(obj, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        f = _Fields(obj, where)
        return cls(
            final_step=f.int_("final_step"),
            state_sha256=f.str_("state_sha256"),
            wall_time_s=f.float_("wall_time_s"),
            samples_per_s=f.float_("samples_per_s"),
            consistency=f.str_("consistency"),
            workers=tuple(str(w) for w in f.list_("workers")),
            checkpoint=f.str_("checkpoint"),
            fingerprint=f.str_("fingerprint"),
            cost=_cost_block(f),
        )


def _cost_block(f: _Fields) -> dict[str, Any] | None:
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
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    kind = _Fields(obj, where).str_("kind", required=True)
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
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    return RunResult.from_json(obj, str(path))
