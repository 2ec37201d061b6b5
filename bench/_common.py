"""Shared helpers for the benchmark scripts: run shoal or DDP and read steady-state step times."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import tempfile

import torch
import torch.multiprocessing as mp

from shoal.launcher.local import RunSpec, free_port, run_local
from shoal.runtime.baseline import ddp_worker

ROOT = pathlib.Path(__file__).resolve().parents[1]
JOBS = {
    "conv": ROOT / "examples" / "digits.py",
    "transformer": ROOT / "examples" / "transformer.py",
}


def machine() -> str:
    cores = len(os.sched_getaffinity(0))
    return f"{platform.machine()}, {cores} cores, torch {torch.__version__}, 1 thread per worker"


def steady(times: list[float], warmup: int) -> float:
    """Median step time after the warm-up steps."""
    return statistics.median(times[warmup:])


def shoal_step_times(
    job: str, kinds: list[str], steps: int, options: list[str], consistency: str = "exact"
) -> list[float]:
    out = pathlib.Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    run_local(
        RunSpec(job, kinds, steps, str(out), consistency, options=options), show_progress=False
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["step_time_s"] for r in rows]


def ddp_step_times(
    job: str, world: int, steps: int, options: dict, slowdowns: list[float] | None = None
) -> list[float]:
    out = pathlib.Path(tempfile.mkdtemp(prefix="ddp-bench-")) / "ddp.json"
    mp.spawn(
        ddp_worker,
        args=(world, free_port(), job, options, steps, str(out), slowdowns),
        nprocs=world,
        join=True,
    )
    return json.loads(out.read_text())["step_times_s"]


def as_options(options: dict) -> list[str]:
    return [f"{k}={v!r}" for k, v in options.items()]
