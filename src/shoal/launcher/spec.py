"""`shoal run`: one worker process per (emulated) device on this machine, kept training through
kills, notices and joins.

The launcher checks the job and flags before starting anything (bad input is one line and
exit code 2). It then acts as the controller of an elastic group: it hosts the rendezvous
TCPStore on 127.0.0.1, starts workers (`python -m shoal.worker`) with their device kind and
the slowdown that makes a CPU process run at that kind's speed relative to the fastest kind
(from the catalog's measured throughputs), injects the `--events`, watches the processes, and
publishes each new generation of the group when its membership changes (see
`shoal.runtime.membership` for the protocol; `controller.py` for the decisions).
"""

from __future__ import annotations

import json
import pathlib
import socket
from dataclasses import dataclass, field

from shoal.errors import UserError
from shoal.job import build_job, load_job_file, parse_options
from shoal.launcher.events import Event
from shoal.perf.devices import load_devices
from shoal.plan import plan_micro_batches
from shoal.runtime.outputs import prepare_out_dir
from shoal.runtime.pacing import pacer_from_env


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
    max_micro_batches: int | None = None
    threads: int = 1
    events: list[Event] = field(default_factory=list)
    checkpoint_every: int = 0
    checkpoint_seconds: float = 0.0
    checkpoint_dir: str | None = None
    resume: bool = False

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
            "--checkpoint-every",
            str(self.checkpoint_every),
            "--checkpoint-seconds",
            str(self.checkpoint_seconds),
        ]
        if self.seed is not None:
            args += ["--seed", str(self.seed)]
        if self.max_micro_batches is not None:
            args += ["--max-micro-batches", str(self.max_micro_batches)]
        if self.checkpoint_dir:
            args += ["--checkpoint-dir", self.checkpoint_dir]
        if self.resume:
            args += ["--resume"]
        for opt in self.options:
            args += ["--option", opt]
        return args


@dataclass(frozen=True)
class Speeds:
    """Per device kind: emulation slowdown (>= 1) and prior time per micro-batch."""

    slowdown: dict[str, float]
    prior: dict[str, float]


def check_run(spec: RunSpec) -> Speeds:
    """Validate everything a worker would trip on, before any process starts."""
    if spec.steps < 1:
        raise UserError(f"--steps must be >= 1, got {spec.steps}")
    if not spec.kinds:
        raise UserError("--workers names no worker")
    job = build_job(load_job_file(spec.job), parse_options(spec.options), spec.seed)
    if spec.max_micro_batches is not None:  # the planner's own check, before any worker starts
        try:
            caps = [spec.max_micro_batches] * len(spec.kinds)
            plan_micro_batches(job.num_micro_batches, [1.0] * len(spec.kinds), caps)
        except UserError as exc:
            raise UserError(f"--max-micro-batches {spec.max_micro_batches}: {exc}") from None
    pacer_from_env()  # a bad SHOAL_EMULATED_HOST_S fails here, not in every worker
    out = prepare_out_dir(spec.out)
    ckpts = pathlib.Path(spec.checkpoint_dir or out / "checkpoints")
    has_ckpt = ckpts.is_dir() and any(ckpts.glob("ckpt-*.json"))
    if has_ckpt and not spec.resume:
        raise UserError(
            f"{out} already holds checkpoints of a run: pass --resume to continue "
            "it, or choose another --out"
        )
    if spec.resume and not has_ckpt:
        raise UserError(f"--resume: no checkpoint found in {ckpts}")
    devices = load_devices()
    kinds = set(spec.kinds) | {e.kind for e in spec.events if e.kind}
    speed = {k: devices.workload_speed(devices.kind(k).name, job.workload) for k in kinds}
    fastest = max(speed.values())
    return Speeds(
        {k: fastest / s for k, s in speed.items()}, {k: 1.0 / s for k, s in speed.items()}
    )


def run_local(spec: RunSpec, show_progress: bool = True) -> dict:
    from shoal.launcher.supervisor import Controller

    speeds = check_run(spec)
    out = pathlib.Path(spec.out)
    if not spec.resume:
        for stale in ("metrics.jsonl", "result.json"):
            (out / stale).unlink(missing_ok=True)
    else:
        (out / "result.json").unlink(missing_ok=True)
    Controller(spec, speeds, show_progress).run()
    return json.loads((out / "result.json").read_text())
