"""The membership timeline: when each worker was alive, and where each event sits in wall time.

Pure derivation from a loaded `Run` (no plotting). A worker is alive from the start of the run
if it is in the first step or its first event is a leave or failure; otherwise from its join. A
leave or failure ends its current interval, a later join opens a new one, and whoever is alive
at the end stays alive until the run's end. `recover` marks the job recovering from a change;
it does not revive a worker. An event without `wall_time_s` is placed at its step's wall time
(interpolated between logged steps); one with neither is kept in the table but not plotted.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from shoal.metrics.training import MembershipEvent, StepLine
from shoal.report.load import Run


@dataclass(frozen=True)
class PlacedEvent:
    """A membership event and its wall time (None when the record allows no placement)."""

    event: MembershipEvent
    time_s: float | None


@dataclass(frozen=True)
class Lane:
    """One timeline row: a worker id, its device and the wall-time intervals it was alive."""

    worker: str
    device: str | None
    intervals: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Timeline:
    start_s: float
    end_s: float
    lanes: tuple[Lane, ...]
    events: tuple[PlacedEvent, ...]


def worker_order(run: Run) -> list[str]:
    """Worker ids in a stable display order: first step by rank, then by first mention."""
    order: list[str] = []
    seen: set[str] = set()

    def add(worker: str) -> None:
        if worker not in seen:
            seen.add(worker)
            order.append(worker)

    if run.steps:
        ranked = sorted(run.steps[0].workers, key=lambda w: (w.rank is None, w.rank or 0))
        for w in ranked:
            add(w.id)
    for e in run.events:
        add(e.worker)
    for s in run.steps:
        for w in s.workers:
            add(w.id)
    return order


def step_time_s(steps: tuple[StepLine, ...], step: int) -> float | None:
    """Wall time at `step`, interpolated linearly between logged steps and clamped at the ends."""
    points = sorted((s.step, s.wall_time_s) for s in steps if s.wall_time_s is not None)
    if not points:
        return None
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, step)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    if x1 == x0:
        return y1
    return y0 + (y1 - y0) * (step - x0) / (x1 - x0)


def place_events(run: Run) -> tuple[PlacedEvent, ...]:
    placed = []
    for e in run.events:
        t = e.wall_time_s
        if t is None and e.step is not None:
            t = step_time_s(run.steps, e.step)
        placed.append(PlacedEvent(e, t))
    return tuple(placed)


def run_span_s(run: Run, events: tuple[PlacedEvent, ...]) -> tuple[float, float]:
    """(start, end) wall time of the run: from 0 to the latest time anything mentions."""
    times = [s.wall_time_s for s in run.steps if s.wall_time_s is not None]
    times += [p.time_s for p in events if p.time_s is not None]
    if run.result is not None and run.result.wall_time_s is not None:
        times.append(run.result.wall_time_s)
    start = min([0.0, *times])
    end = max([start, *times])
    return start, end


def _devices(run: Run) -> dict[str, str]:
    devices: dict[str, str] = {}
    for s in run.steps:
        for w in s.workers:
            if w.device:
                devices.setdefault(w.id, w.device)
    for e in run.events:
        if e.device:
            devices.setdefault(e.worker, e.device)
    return devices


def _first_seen_s(run: Run, worker: str) -> float | None:
    for s in run.steps:
        if any(w.id == worker for w in s.workers):
            return s.wall_time_s
    return None


def build_timeline(run: Run) -> Timeline:
    """Derive the lanes (alive intervals per worker) and placed events of a run."""
    events = place_events(run)
    start, end = run_span_s(run, events)
    initial = {w.id for w in run.steps[0].workers} if run.steps else set()
    devices = _devices(run)
    lanes = []
    for worker in worker_order(run):
        mine = [p for p in events if p.event.worker == worker and p.time_s is not None]
        # a notice, a stall or a recovery changes no membership (a stall may end in a failure)
        changes = [p for p in mine if p.event.event not in ("recover", "notice", "stall")]
        since: float | None = None
        if worker in initial or (changes and changes[0].event.event != "join"):
            since = start
        elif not changes:
            since = _first_seen_s(run, worker)  # logged in steps but no join recorded
        intervals = []
        for p in changes:
            assert p.time_s is not None
            if p.event.event == "join" and since is None:
                since = p.time_s
            elif p.event.event in ("leave", "fail") and since is not None:
                intervals.append((since, p.time_s))
                since = None
        if since is not None:
            intervals.append((since, end))
        lanes.append(Lane(worker, devices.get(worker), tuple(intervals)))
    return Timeline(start, end, tuple(lanes), events)
