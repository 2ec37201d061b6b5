"""`shoal run`: start one worker process per (emulated) device on this machine.

The launcher checks the job and the flags before starting anything (so bad input is one line
and exit code 2), gives each worker its rank, its device kind and the slowdown that makes a
CPU process run at that kind's speed relative to the fastest kind in the run (from the
catalog's measured throughputs), then watches the workers and the metrics file for progress.
Workers are ordinary `python -m shoal.worker` processes on a gloo group at 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from shoal.cluster import load_catalog
from shoal.console import Progress
from shoal.errors import UserError
from shoal.job import build_job, load_job_file, parse_options
from shoal.runtime.metrics import prepare_out_dir


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class RunSpec:
    job: str
    kinds: list[str]
    steps: int
    out: str
    consistency: str = "exact"
    seed: int | None = None
    options: list[str] = field(default_factory=list)
    replan_every: int = 5
    threads: int = 1

    def worker_args(self) -> list[str]:
        args = [
            self.job,
            "--steps",
            str(self.steps),
            "--out",
            self.out,
            "--consistency",
            self.consistency,
            "--replan-every",
            str(self.replan_every),
            "--threads",
            str(self.threads),
        ]
        if self.seed is not None:
            args += ["--seed", str(self.seed)]
        for opt in self.options:
            args += ["--option", opt]
        return args


def check_run(spec: RunSpec) -> tuple[list[float], list[float]]:
    """Validate everything a worker would trip on; return (slowdowns, prior times) per worker."""
    if spec.steps < 1:
        raise UserError(f"--steps must be >= 1, got {spec.steps}")
    if not spec.kinds:
        raise UserError("--workers names no worker")
    job = build_job(load_job_file(spec.job), parse_options(spec.options), spec.seed)
    prepare_out_dir(spec.out)
    catalog = load_catalog()
    speeds = [catalog.relative_speed(k, job.workload) for k in spec.kinds]
    fastest = max(speeds)
    return [fastest / s for s in speeds], [1.0 / s for s in speeds]


def _tail(path: pathlib.Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_local(spec: RunSpec, show_progress: bool = True) -> dict:
    slowdowns, priors = check_run(spec)
    out = pathlib.Path(spec.out)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    for stale in ("metrics.jsonl", "result.json"):
        (out / stale).unlink(missing_ok=True)
    world, port = len(spec.kinds), free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            SHOAL_QUIET="1",
            SHOAL_WORKER_KINDS=",".join(spec.kinds),
            SHOAL_WORKER_PRIORS=",".join(f"{p:.6g}" for p in priors),
            SHOAL_SLOWDOWN=f"{slowdowns[rank]:.6g}",
        )
        log = open(logs / f"worker-{rank}.log", "w")  # noqa: SIM115 - owned by the child
        cmd = [sys.executable, "-m", "shoal.worker", *spec.worker_args()]
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    progress = Progress(spec.steps) if show_progress else None
    failed = _watch(procs, out / "metrics.jsonl", progress)
    if progress:
        progress.close()
    if failed is not None:
        rank, code = failed
        text = _tail(logs / f"worker-{rank}.log")
        last = text.splitlines()[-1] if text else ""
        if code == 2 and last.startswith("shoal: error: "):
            raise UserError(last.removeprefix("shoal: error: "))
        raise RuntimeError(f"worker {rank} exited with code {code}; its log ends:\n{text}")
    return json.loads((out / "result.json").read_text())


def _watch(procs, metrics: pathlib.Path, progress: Progress | None) -> tuple[int, int] | None:
    """Wait for all workers; on the first failure stop the rest and return (rank, code)."""
    seen = 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
                for p in procs:
                    p.wait()
                return bad[0]
            if progress and metrics.exists():
                rows = metrics.read_text().splitlines()
                complete = [r for r in rows[seen:] if r.endswith("}")]
                for row in complete:
                    rec = json.loads(row)
                    progress.update(rec["step"] + 1, rec["loss"], rec["samples_per_s"])
                seen += len(complete)
            if all(c == 0 for c in codes):
                return None
            time.sleep(0.1)
    except BaseException:
        for p in procs:
            p.kill()
        raise
