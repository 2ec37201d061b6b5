"""The transient-server paper's measurements (Li et al., ICAC'19), read from the shipped tables.

Owns the list of measured configurations the parameter-server model is fitted on and judged by:
each is one cluster shape (GPU kind, number of workers, number of parameter servers, pricing
tier) with the durations of its runs of 64,000 ResNet-32 steps. Sources, all under
`shoal/data/transient/training/` (Apache-2.0, see its LICENSE and the project NOTICE):

- `ps_experiment/{1,2}ps{N}{k,v}`: spot K80 or V100 workers, 1 or 2 on-demand parameter servers
  (the paper's Fig. 6; 5 runs each).
- `1ps_k80/{N}_data.csv`: one run per size, 1 parameter server (duration = wall time from step 0
  to the last evaluation at >= 64,000 steps).
- `k80_on_demand/{k80,2,4,8}-demand`: on-demand K80, 10 runs each (`k80`: one worker, no PS).
- `k80_spot/{2,4,8}-spot`: spot K80; for fitting a step time only runs in which no server was
  revoked count (`vm_data.csv` says which); `spot_runs` returns every completed run for the
  comparison with revocations.
- `p100_v100_spot/{p100,v100}` (one worker, no PS) and `{4p100,4v100}` (4 workers, 1 PS).

Beside each run's duration it reads the run's evaluation curve (`train_data.csv`: wall time and
global step of the evaluator's points, one every ~4,000 steps) and splits the duration in two:
a line through the points after step 0 gives the run's steady seconds per step (times 64,000:
`steady_s`) and its intercept at step 0 minus the step-0 point's time (`offsets_s`), the start
offset of the measurement. The evaluator picks a checkpoint up only at its next poll (~60 s
apart), so a point's time carries up to a minute of delay: the line's residuals have an sd of
~17 s (a uniform minute's) in every series, and the offsets of one series scatter by as much.

It also reads the preemptible VM lifetimes with their region (the VM names carry the zone), so
a revocation model can be per kind and region.
"""

from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from importlib import resources

TOTAL_STEPS = 64000


@dataclass(frozen=True)
class Measurement:
    """One measured cluster shape and the durations (s) of its runs."""

    name: str
    kind: str
    num_workers: int
    num_ps: int  # 0: a lone worker that updates its own parameters
    tier: str
    durations_s: tuple[float, ...]
    steady_s: tuple[float, ...] = ()  # per run: 64,000 x the fitted steady seconds per step
    offsets_s: tuple[float, ...] = ()  # per run: the line's time at step 0 - the step-0 point's

    @property
    def mean_s(self) -> float:
        return statistics.mean(self.durations_s)

    @property
    def steady_mean_s(self) -> float:
        return statistics.mean(self.steady_s)

    @property
    def sd_s(self) -> float:
        """Sample standard deviation over runs (0 for a single run)."""
        return statistics.stdev(self.durations_s) if len(self.durations_s) > 1 else 0.0


def _path(*parts: str):
    return resources.files("shoal.data").joinpath("transient", *parts)


def _column(parts: tuple[str, ...], key: str = "Duration") -> list[dict[str, str]]:
    with _path("training", *parts).open() as fh:
        return [row for row in csv.DictReader(fh) if row.get(key)]


def _durations(*parts: str) -> tuple[float, ...]:
    return tuple(float(row["Duration"]) for row in _column(parts))


def _curves(*parts: str) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(zone, run) -> the run's evaluation points (step, wall time s), in step order."""
    out: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for row in _column(parts, key="Wall Time"):
        key = (row.get("Zone", ""), row.get("Run", "1"))
        out.setdefault(key, []).append((int(row["Step"]), float(row["Wall Time"])))
    return {key: sorted(points) for key, points in out.items()}


def curve_split(points: list[tuple[int, float]]) -> tuple[float, float, float] | None:
    """(duration, steady, offset) s of one evaluation curve; None if it never reached the end.

    duration: the first point at >= 64,000 steps minus the step-0 point (the last one: a run
    restarted from scratch has two); steady and offset: 64,000 x the slope and the intercept of
    the least-squares line through the points after step 0 up to that first point."""
    steps = [s for s, _ in points]
    if steps[-1] < TOTAL_STEPS:
        return None
    start = max(i for i, s in enumerate(steps) if s == 0)
    end = next(i for i, s in enumerate(steps) if s >= TOTAL_STEPS)
    xs = steps[start + 1 : end + 1]
    ys = [t - points[start][1] for _, t in points[start + 1 : end + 1]]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope /= sum((x - mx) ** 2 for x in xs)
    return ys[-1], TOTAL_STEPS * slope, my - slope * mx


def _with_curves(m: Measurement, *parts: str, skip=frozenset()) -> Measurement:
    """`m` with the steady times and offsets of the completed runs in file `parts`."""
    done = [curve_split(c) for key, c in _curves(*parts).items() if key not in skip]
    done = [d for d in done if d is not None]
    return replace(m, steady_s=tuple(d[1] for d in done), offsets_s=tuple(d[2] for d in done))


def _ps_experiment() -> list[Measurement]:
    rows = []
    for num_ps in (1, 2):
        for n in range(2, 9):
            for letter, kind in (("k", "k80"), ("v", "v100")):
                name = f"{num_ps}ps{n}{letter}"
                if num_ps == 1 and kind == "k80":
                    # one run per size, kept as its evaluation curve only
                    path = ("1ps_k80", f"{n}_data.csv")
                    (curve,) = _curves(*path).values()
                    span = curve[-1][1] - curve[0][1]
                    m = Measurement(name, kind, n, 1, "spot", (span,))
                else:
                    runs = _durations("ps_experiment", name, "train_data_processed.csv")
                    m = Measurement(name, kind, n, num_ps, "spot", runs)
                    path = ("ps_experiment", name, "train_data.csv")
                rows.append(_with_curves(m, *path))
    return rows


def _revoked_runs(size: int) -> set[tuple[str, str]]:
    """(zone, run) of the spot K80 runs in which any server was revoked."""
    revoked = set()
    for row in _column(("k80_spot", f"{size}-spot", "vm_data.csv"), key="VM_name"):
        if row["Revoked"] != "Job completed":
            zone_run = re.search(r"([a-z]+-[a-z]+\d-[a-z])-run(\d+)", row["VM_name"])
            assert zone_run, row["VM_name"]
            revoked.add((zone_run.group(1), zone_run.group(2)))
    return revoked


def spot_runs(size: int) -> tuple[float, ...]:
    """Durations of every completed spot K80 run of `size` workers, revocations included."""
    return tuple(
        float(r["Duration"]) for r in _column(("k80_spot", f"{size}-spot", "agg_data.csv"))
    )


def _k80_spot_without_revocations(size: int) -> Measurement:
    revoked = _revoked_runs(size)
    runs = _column(("k80_spot", f"{size}-spot", "agg_data.csv"))
    kept = tuple(float(r["Duration"]) for r in runs if (r["Zone"], r["Run"]) not in revoked)
    m = Measurement(f"{size}-spot-r0", "k80", size, 1, "spot", kept)
    return _with_curves(m, "k80_spot", f"{size}-spot", "train_data.csv", skip=revoked)


@cache
def load_measurements() -> tuple[Measurement, ...]:
    """Every revocation-free measured configuration, in a fixed order."""
    rows = _ps_experiment()
    for size in (1, 2, 4, 8):
        folder = "k80-demand" if size == 1 else f"{size}-demand"
        runs = _durations("k80_on_demand", folder, "train_data_processed.csv")
        m = Measurement(folder, "k80", size, int(size > 1), "on_demand", runs)
        rows.append(_with_curves(m, "k80_on_demand", folder, "train_data.csv"))
    rows += [_k80_spot_without_revocations(size) for size in (2, 4, 8)]
    shapes = (("p100", "p100", 1), ("v100", "v100", 1), ("4p100", "p100", 4), ("4v100", "v100", 4))
    for name, kind, size in shapes:
        runs = _durations("p100_v100_spot", name, "train_data_processed.csv")
        m = Measurement(name, kind, size, int(size > 1), "spot", runs)
        rows.append(_with_curves(m, "p100_v100_spot", name, "train_data.csv"))
    return tuple(rows)


_ZONE = re.compile(r"((?:us|europe|asia)-[a-z]+\d)-[a-z]")


@cache
def regional_lifetimes() -> dict[tuple[str, str], tuple[float, ...]]:
    """(kind, region) -> measured lifetimes (s) of preemptible VMs, Feb 2019 (`lifetime.csv`)."""
    out: dict[tuple[str, str], list[float]] = {}
    kind = None
    with _path("lifetime", "lifetime.csv").open() as fh:
        for row in csv.reader(fh):
            head = row[0].strip() if row else ""
            if head in ("K80", "P100", "V100"):
                kind = head.lower()
            elif head.startswith("Previous"):
                break  # older CPU-only runs follow
            elif kind and len(row) >= 3 and row[1] and (zone := _ZONE.search(head)):
                start = datetime.strptime(row[1].strip(), "%m/%d/%y %H:%M")
                stop = datetime.strptime(row[2].strip(), "%m/%d/%y %H:%M")
                out.setdefault((kind, zone.group(1)), []).append((stop - start).total_seconds())
    return {key: tuple(sorted(values)) for key, values in out.items()}
