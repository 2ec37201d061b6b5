"""Shared helpers for the benchmark scripts: run shoal or DDP and read steady-state step times."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile

import torch
import torch.multiprocessing as mp
from ddp_yardstick import ddp_worker

from shoal.launcher.spec import free_port

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


def shoal_run_rows(
    job: str,
    kinds: list[str],
    steps: int,
    options: list[str],
    consistency: str = "exact",
    host_s: float | None = None,
    cap: int | None = None,
    flags: list[str] | None = None,
) -> list[dict]:
    """The per-step records of a `shoal run` in a fresh interpreter (as a user runs it;
    nothing of this process's state, threads or earlier children can slow it). `host_s` fixes
    the host time per micro-batch that emulated kinds pace against (see runtime/pacing.py);
    `cap` is `--max-micro-batches`; `flags` are more `shoal run` flags."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="shoal-bench-"))
    cmd = [sys.executable, "-m", "shoal", "run", job, "--workers", ",".join(kinds)]
    cmd += ["--steps", str(steps), "--out", str(out), "--consistency", consistency]
    for option in options:
        cmd += ["--option", option]
    if cap is not None:
        cmd += ["--max-micro-batches", str(cap)]
    cmd += flags or []
    env = dict(os.environ)
    if host_s is not None:
        env["SHOAL_EMULATED_HOST_S"] = repr(host_s)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("kind") == "step"]


def rotation(sides: list[str], repeat: int) -> list[str]:
    """The sides in the order repeat `repeat` runs them: each repeat starts one side later, so
    no side always runs first (on a cold host) or last."""
    shift = repeat % len(sides)
    return sides[shift:] + sides[:shift]


def per_repeat(numerators: list[float], denominators: list[float]) -> list[float]:
    """Each repeat's own ratio. Its two runs are minutes apart at most, so the host's drift
    over a whole benchmark, which moves the sides' medians, moves these much less."""
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def check_runs(p: argparse.ArgumentParser, args) -> None:
    """The step-time benches' --steps, --warmup and --repeats, checked before any run: at
    least one repeat, and a step period (one step's start to the next's) after the warm-up."""
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1, not {args.repeats}")
    if args.warmup < 0:
        p.error(f"--warmup must be at least 0, not {args.warmup}")
    if args.steps < args.warmup + 2:
        p.error(
            f"--steps must be at least --warmup + 2 = {args.warmup + 2} (a step period after "
            f"the warm-up), not {args.steps}"
        )


def add_step_flags(p: argparse.ArgumentParser, configs: dict, repeats: int) -> None:
    """The step-time benches' flags: steps, warm-up, repeats, one of `configs`' jobs, b, B."""
    p.add_argument("--steps", type=int, default=40, help="steps per run")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    p.add_argument("--repeats", type=int, default=repeats, help="runs of each side")
    p.add_argument("--job", choices=sorted(configs), help="one job (None: each)")
    p.add_argument("--micro-batch-size", type=int, help="b (None: the job's setting here)")
    p.add_argument("--global-batch-size", type=int, help="B (None: the job's setting here)")


def job_options(p: argparse.ArgumentParser, args, configs: dict, world: int) -> dict[str, dict]:
    """Each job the flags name (`--job`, or every one of `configs`) with its options: the
    config's b and B unless --micro-batch-size / --global-batch-size say otherwise, checked
    for `world` ranks (see `check_batches`)."""
    jobs = {}
    for name, defaults in configs.items():
        if args.job not in (None, name):
            continue
        options = dict(defaults)
        if args.micro_batch_size is not None:
            options["micro_batch_size"] = args.micro_batch_size
        if args.global_batch_size is not None:
            options["global_batch_size"] = args.global_batch_size
        check_batches(p, options["micro_batch_size"], options["global_batch_size"], world)
        jobs[name] = options
    return jobs


def check_batches(p: argparse.ArgumentParser, b: int, B: int, world: int = 2) -> None:
    """A micro-batch size b and global batch size B that DDP's equal split over `world`
    ranks can run: B a multiple of b, and its M = B / b micro-batches a multiple of `world`
    (one rank: B a multiple of b)."""
    for flag, value in (("--micro-batch-size", b), ("--global-batch-size", B)):
        if value < 1:
            p.error(f"{flag} must be at least 1, not {value}")
    if world == 1 and B % b:
        p.error(f"--global-batch-size {B} must be a multiple of --micro-batch-size {b}")
    if B % (b * world):
        p.error(
            f"--global-batch-size {B} must be a multiple of {world} x --micro-batch-size {b}: "
            f"DDP's equal split gives each of its {world} ranks the same micro-batches"
        )


def step_periods(rows: list[dict]) -> list[float]:
    """Seconds from one step's record to the next: everything a step costs, bookkeeping
    between steps included, as DDP's steps are timed from start to start."""
    return [b["wall_time_s"] - a["wall_time_s"] for a, b in zip(rows, rows[1:])]


def shoal_step_times(*args, **kwargs) -> list[float]:
    """Step periods of a `shoal run` (arguments as `shoal_run_rows`)."""
    return step_periods(shoal_run_rows(*args, **kwargs))


def ddp_step_times(
    job: str,
    world: int,
    steps: int,
    options: dict,
    slowdowns: list[float] | None = None,
    host_s: float | None = None,
) -> list[float]:
    """Step times of torch DDP ranks spawned from a fresh interpreter, like shoal's runs."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="ddp-bench-")) / "ddp.json"
    args = json.dumps([world, job, options, steps, str(out), slowdowns, host_s])
    done = subprocess.run(
        [sys.executable, __file__, "--ddp", args], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"DDP baseline failed:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text())["step_times_s"]


def _ddp_args(text: str) -> list:
    """run_ddp's JSON: [world, job, options, steps, out, slowdowns, host_s] (argparse type)."""
    try:
        args = json.loads(text)
    except ValueError:
        args = None
    if not (isinstance(args, list) and len(args) == 7 and type(args[0]) is int and args[0] > 0):
        raise argparse.ArgumentTypeError(
            f"not a JSON list [world, job, options, steps, out, slowdowns, host_s]: {text!r}"
        )
    return args


def _spawn_ddp(args: list) -> None:
    world, *rest = args  # ddp_worker's arguments after the rank and the port
    mp.spawn(ddp_worker, args=(world, free_port(), *rest), nprocs=world, join=True)


def as_options(options: dict) -> list[str]:
    return [f"{k}={v!r}" for k, v in options.items()]


if __name__ == "__main__":
    # Not a bench itself: run_ddp starts this file as the DDP baseline's process.
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] + " Run directly, the DDP baseline's process."
    )
    p.add_argument(
        "--ddp",
        type=_ddp_args,
        required=True,
        metavar="JSON",
        help="run_ddp's arguments: [world, job, options, steps, out, slowdowns, host_s]",
    )
    _spawn_ddp(p.parse_args().ddp)
