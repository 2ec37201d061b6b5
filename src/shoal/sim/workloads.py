"""Workloads: Pollux's 160-job CSVs, EasyScale-format CSVs, and jobs sampled from Philly.

Every loader turns rows into `JobSpec`s and reports a bad row as a `UserError` naming the file
and line. A workload spec on the command line is a path (the format is told by its header), or
`pollux:N[:LOAD]` (Pollux's packaged `workload-N.csv` at job load 0.5, 1.0 (the default),
1.5 or 2.0: 80 to 320 jobs sampled over the same 8-hour window), or `philly:N[:SEED]` (N jobs
sampled from the real Philly trace; `philly:all` replays all 82,247).

Work. Pollux jobs train to the end of their application's measured validation run. An EasyScale
job trains `epochs` over 1 % of its dataset (as EasyScale's simulator does) at batch
`batch_size x max_parallelism`. A Philly job's work is calibrated so that on its requested number
of GPUs of the reference kind, consolidated, at its batch size, it runs for its measured duration.
Fixed-batch work is converted to the progress that many steps reach from the start of the
curve (`GoodputModel.progress_after`), so a job given alone its allocation takes its steps or
its duration.
"""

from __future__ import annotations

import csv
import math
import random
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path

from shoal.cluster.nodes import MAX_GPUS
from shoal.digits import ascii_digits
from shoal.errors import UserError, unreadable
from shoal.perf.devices import load_devices
from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import APPS, PROFILE_KIND, load_profile
from shoal.sim.jobs import JobSpec
from shoal.sim.simulator import MAX_TIME_S

# EasyScale's applications mapped onto the measured profile of the closest model we have.
EASYSCALE_APPS = {
    "bert": "bert",
    "electra": "bert",
    "resnet50": "imagenet",
    "vgg19": "imagenet",
    "swin": "imagenet",
    "swintransformer": "imagenet",
    "shufflenetv2": "imagenet",
    "yolov3": "yolov3",
    "ncf": "ncf",
}
# 1 % of each dataset's size, as in EasyScale's simulator (samples per epoch).
EASYSCALE_EPOCH_SAMPLES = {"imagenet": 12800.0, "yolov3": 165.51, "bert": 886.41, "ncf": 49708.45}
# Philly jobs get an application by their GPU-time, short jobs from small models.
PHILLY_APPS_BY_GPU_HOURS = ((1.0, ("cifar10", "ncf")), (10.0, ("yolov3", "deepspeech2", "cifar10")))
PHILLY_APPS_LONG = ("imagenet", "bert", "deepspeech2")


def _rows(path: Path):
    # utf-8-sig: a byte-order mark (as spreadsheets write) would otherwise stick to the first
    # column's name, so a Pollux file lost its `name` column and a Philly one its `timestamp`
    rows = 0
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise UserError(f"{path}:1: empty workload file")
            for lineno, row in enumerate(reader, start=2):
                if row and any(cell.strip() for cell in row):
                    rows += 1
                    yield lineno, dict(zip([h.strip() for h in header], row, strict=False)), row
    except (OSError, UnicodeDecodeError) as exc:  # permissions, an I/O error: was a traceback
        raise UserError(f"{path}: {unreadable(exc)}") from None
    except csv.Error as exc:  # e.g. a field past the csv module's limit: was a traceback
        raise UserError(f"{path}:{reader.line_num}: not CSV ({exc})") from None
    if not rows:  # a header alone ran 0 jobs, exit 0 (Philly: an IndexError)
        raise UserError(f"{path}: no jobs")


def _num(path: Path, lineno: int, row: dict, key: str, kind=float, minimum: float | None = 0):
    try:
        value = kind(ascii_digits(row[key]))
        if not math.isfinite(value):  # NaN or inf seconds, GPUs: a simulation that never ends
            raise ValueError
    except (KeyError, TypeError, ValueError, OverflowError):
        raise UserError(f"{path}:{lineno}: bad or missing {key!r} value {row.get(key)!r}") from None
    if minimum is not None and value < minimum:
        raise UserError(f"{path}:{lineno}: {key} must be >= {minimum}, got {value}")
    return value


def _check_length(path: Path, lineno: int, what: str, seconds: float) -> None:
    """A job longer alone than the simulator's horizon can never finish, and the simulation
    would run a round a tick to the horizon (~30 min with one job: epochs 1e300 hung)."""
    if seconds > MAX_TIME_S:
        raise UserError(
            f"{path}:{lineno}: {what}: the job alone would run {seconds / 86400:,.3g} days, "
            f"more than the simulator's horizon of {MAX_TIME_S / 86400:.0f} days"
        )


def _alone_s(app: str, gpus: int, batch: int, steps: float) -> float:
    """A job's time alone on its GPUs of the profiled kind, consolidated (as a Philly job's is
    set), for `_check_length`."""
    return steps * goodput_model(app).step_time_s(
        ((PROFILE_KIND, gpus),), math.ceil(gpus / 4), batch
    )


def _check_arrival(path: Path, lineno: int, what: str, arrival_s: float) -> None:
    """A job arriving at or after the horizon never ran: the simulation stopped first and the
    job vanished from the results (an arrival of 1e300 s also made the makespan 1e300 s)."""
    if arrival_s >= MAX_TIME_S:
        raise UserError(
            f"{path}:{lineno}: {what}: the job arrives {arrival_s / 86400:,.3g} days after the "
            f"start, not before the simulator's horizon of {MAX_TIME_S / 86400:.0f} days"
        )


def _arrival_s(path: Path, lineno: int, row: dict) -> float:
    arrival_s = _num(path, lineno, row, "time")
    _check_arrival(path, lineno, f"time {arrival_s:g}", arrival_s)
    return arrival_s


def _whole(text: str) -> int:
    """A whole number, also written as a float ('4.0'); 1.5 GPUs is an error, not 1 GPU."""
    value = float(text)
    if not value.is_integer():
        raise ValueError(text)
    return int(value)


def _app(path: Path, lineno: int, name: str, table: dict[str, str] | None = None) -> str:
    app = (table or {a: a for a in APPS}).get(name.strip().lower())
    if app is None:
        raise UserError(f"{path}:{lineno}: unknown application {name!r}")
    return app


def load_pollux_workload(path: Path) -> list[JobSpec]:
    jobs = []
    first_line: dict[str, int] = {}
    for lineno, row, _ in _rows(path):
        name = row.get("name") or f"job-{lineno}"
        # the simulator tells jobs by name: a repeat silently dropped a job from the results
        # while it still held GPUs (only EasyScale's format documents a repeat as a replacement)
        if name in first_line:
            raise UserError(f"{path}:{lineno}: job name {name!r} repeats line {first_line[name]}")
        first_line[name] = lineno
        app = _app(path, lineno, row.get("application", ""))
        gpus = _gpus(path, lineno, row, "num_replicas", int)
        batch = _num(path, lineno, row, "batch_size", int, 1)
        work = load_profile(app).total_progress
        # a batch of 10^8 on a gang policy ran past the horizon: exit 0, no job finished, a
        # makespan of 10^22 s
        steps = goodput_model(app).steps_between(batch, 0.0, work)
        _check_length(
            path, lineno, f"batch_size {float(batch):g}", _alone_s(app, gpus, batch, steps)
        )
        jobs.append(
            JobSpec(
                name=name,
                arrival_s=_arrival_s(path, lineno, row),
                app=app,
                requested_gpus=gpus,
                batch_size=batch,
                total_progress=work,
            )
        )
    return jobs


def _gpus(path: Path, lineno: int, row: dict, key: str, kind=int) -> int:
    """A row's GPU count, from 1 to the largest cluster's (10^20 replicas ran, and was a
    20-digit number in a gang policy's error)."""
    gpus = _num(path, lineno, row, key, kind, 1)
    if gpus > MAX_GPUS:
        raise UserError(
            f"{path}:{lineno}: {key} must be at most {MAX_GPUS:,} (the largest cluster), "
            f"got {row[key]!r}"
        )
    return gpus


def load_easyscale_workload(path: Path) -> list[JobSpec]:
    by_name: dict[str, JobSpec] = {}
    for lineno, row, _ in _rows(path):
        name = (row.get("name") or "").strip()
        if not name:  # was a KeyError traceback without the column
            raise UserError(f"{path}:{lineno}: missing 'name' value")
        app = _app(path, lineno, row.get("application", ""), EASYSCALE_APPS)
        mp = _gpus(path, lineno, row, "max_parallelism")
        batch = _num(path, lineno, row, "batch_size", int, 1) * mp
        epochs = _num(path, lineno, row, "epochs", float, 0)
        steps = max(1.0, epochs * EASYSCALE_EPOCH_SAMPLES[app] / batch)
        _check_length(path, lineno, f"epochs {epochs:g}", _alone_s(app, mp, batch, steps))
        het = _num(path, lineno, row, "enable_heterogeneous_deterministic", float, 0)
        kind = (row.get("preferred_gpu") or "").strip().lower() or None
        if kind is not None and kind not in load_devices().memory_gib:
            raise UserError(f"{path}:{lineno}: unknown GPU kind {kind!r}")
        # a repeated name replaces the earlier row, as EasyScale's simulator does
        by_name[name] = JobSpec(
            name=name,
            arrival_s=_arrival_s(path, lineno, row),
            app=app,
            requested_gpus=mp,
            batch_size=batch,
            total_progress=goodput_model(app).progress_after(batch, steps),
            preferred_kind=kind,
            mixed_kinds_ok=het != 0,
        )
    return list(by_name.values())


@cache
def _philly_rows(path: Path) -> tuple[tuple[float, float, int, int], ...]:
    """(arrival epoch s, duration s, GPUs, line number) of every Philly job, sorted by arrival."""
    out = []
    for lineno, row, raw in _rows(path):
        try:
            ts = datetime.fromisoformat(row["timestamp"]).timestamp()
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{path}:{lineno}: bad timestamp {raw[0]!r}") from None
        duration = _num(path, lineno, row, "duration", float, 0)
        _check_length(path, lineno, f"duration {duration:g}", duration)
        # no cluster holds more (1e300 was a 300-digit number in an error)
        gpus = _gpus(path, lineno, row, "num_gpus", _whole)
        out.append((ts, duration, gpus, lineno))
    out.sort()
    return tuple(out)


def philly_path() -> Path:
    return Path(str(resources.files("shoal.data").joinpath("pollux", "traces", "philly.csv")))


def sample_philly(
    num_jobs: int | None,
    seed: int = 0,
    path: Path | None = None,
    reference_kind: str = PROFILE_KIND,
) -> list[JobSpec]:
    """`num_jobs` consecutive Philly jobs from a random start (None: the whole trace)."""
    path = path or philly_path()
    rows = _philly_rows(path)
    rng = random.Random(seed)
    if num_jobs is not None and num_jobs > len(rows):  # was the whole trace, without a word
        raise UserError(
            f"philly:{num_jobs}: the trace has {len(rows):,} jobs (philly:all replays them all)"
        )
    if num_jobs is None or num_jobs == len(rows):
        chosen = rows
    else:
        if num_jobs < 1:
            raise UserError("number of Philly jobs must be >= 1")
        start = rng.randrange(len(rows) - num_jobs + 1)
        chosen = rows[start : start + num_jobs]
    t0 = chosen[0][0]
    jobs = []
    for ts, duration, gpus, lineno in chosen:
        if ts - t0 >= MAX_TIME_S:  # the text back only for the message (philly:all: 82k rows)
            _check_arrival(path, lineno, f"timestamp {datetime.fromtimestamp(ts)}", ts - t0)
        gpu_hours = duration * gpus / 3600
        apps = next(
            (a for limit, a in PHILLY_APPS_BY_GPU_HOURS if gpu_hours < limit), PHILLY_APPS_LONG
        )
        app = rng.choice(apps)
        model = goodput_model(app)
        profile = model.profile
        batch = min(profile.max_batch_size, profile.init_batch_size * gpus)
        nodes = math.ceil(gpus / 4)
        step_s = model.step_time_s(((reference_kind, gpus),), nodes, batch)
        progress = model.progress_after(batch, max(duration, 1.0) / step_s)
        jobs.append(JobSpec(f"philly-{lineno}", ts - t0, app, gpus, int(batch), progress))
    return jobs


POLLUX_LOADS = ("0.5", "1.0", "1.5", "2.0")


def pollux_workload_path(spec: str) -> Path:
    """The packaged file of `pollux:N[:LOAD]` (load 1.0 lives in `workloads/`)."""
    parts = spec.split(":")
    load = parts[2] if len(parts) > 2 else "1.0"
    if not parts[1]:
        raise UserError(f"bad Pollux workload {spec!r}: no workload number (pollux:N[:LOAD])")
    if len(parts) > 3 or load not in POLLUX_LOADS:
        raise UserError(f"bad Pollux workload {spec!r} (loads: {', '.join(POLLUX_LOADS)})")
    folder = "workloads" if load == "1.0" else f"workloads-{load}"
    root = resources.files("shoal.data").joinpath("pollux", folder)
    name = f"workload-{parts[1]}.csv"
    if not root.joinpath(name).is_file():
        raise UserError(f"no packaged Pollux workload {name} at load {load}")
    return Path(str(root.joinpath(name)))


def load_workload(spec: str, seed: int = 0) -> list[JobSpec]:
    """Resolve a workload spec (see the module docstring)."""
    if spec.startswith("pollux:"):
        return load_pollux_workload(pollux_workload_path(spec))
    if spec.startswith("philly:"):
        parts = spec.split(":")
        if len(parts) > 3:  # philly:5:1:9 ran, its extra part dropped
            raise UserError(f"bad Philly workload {spec!r} (expected philly:N[:SEED])")
        count = None if parts[1] == "all" else _int_arg(parts[1], spec)
        return sample_philly(count, _int_arg(parts[2], spec) if len(parts) > 2 else seed)
    path = Path(spec)
    if path.is_dir():
        raise UserError(f"workload {spec} is a directory, not a CSV file")
    if not path.is_file():
        raise UserError(f"workload file not found: {spec}")
    try:
        with path.open(encoding="utf-8-sig") as fh:
            header = fh.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: {unreadable(exc)}") from None
    if "max_parallelism" in header:
        return load_easyscale_workload(path)
    if "num_replicas" in header:
        return load_pollux_workload(path)
    if "num_gpus" in header and "timestamp" in header:
        return sample_philly(None, seed, path)
    raise UserError(f"{path}:1: unknown workload format (header {header.strip()!r})")


def _int_arg(text: str, spec: str) -> int:
    try:
        return int(ascii_digits(text))
    except ValueError:
        raise UserError(f"bad number {text!r} in workload spec {spec!r}") from None
