"""A worker process: join the group, train for N steps, write the run's outputs (rank 0).

Launched once per device, either by `shoal run` or by torchrun, through `python -m
shoal.worker JOB.py ...`. The group comes from the usual environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK); `shoal run` adds each worker's device kind and its
emulation slowdown.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import time

import torch
import torch.distributed as dist

from shoal.console import Progress
from shoal.job import build_job, load_job_file, parse_options
from shoal.runtime.checkpoint import save_checkpoint
from shoal.runtime.metrics import MetricsWriter, prepare_out_dir, write_json_atomic
from shoal.runtime.pacing import Pacer
from shoal.runtime.state import state_sha256, training_state
from shoal.runtime.trainer import StepRecord, Trainer


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="job file defining make_job(**options)")
    p.add_argument("--steps", type=int, required=True, help="number of optimizer steps")
    p.add_argument("--out", required=True, help="run directory for metrics, result, checkpoint")
    p.add_argument("--consistency", choices=["exact", "fast"], default="exact")
    p.add_argument("--seed", type=int, default=None, help="override the job's seed")
    p.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to make_job (repeatable)",
    )
    p.add_argument("--replan-every", type=int, default=5, help="re-plan every N steps")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads per worker (pinned: kernels may sum differently per thread count)",
    )


def job_fingerprint(job_path: str, options: dict, job, consistency: str, model) -> str:
    shapes = [(n, str(p.dtype), tuple(p.shape)) for n, p in model.state_dict().items()]
    blob = json.dumps(
        [
            pathlib.Path(job_path).name,
            sorted(options.items()),
            job.micro_batch_size,
            job.global_batch_size,
            job.seed,
            consistency,
            shapes,
        ],
        default=repr,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def step_metrics(rec: StepRecord, trainer: Trainer, kinds: list[str], wall_s: float) -> dict:
    return {
        "kind": "step",
        "step": rec.step,
        "loss": rec.loss,
        "global_batch_size": rec.global_batch_size,
        "micro_batch_size": trainer.job.micro_batch_size,
        "step_time_s": rec.step_time_s,
        "samples_per_s": rec.global_batch_size / rec.step_time_s,
        "wall_time_s": wall_s,
        "redone": rec.redone,
        "workers": [
            {
                "id": f"w{r}",
                "rank": r,
                "device": kinds[r],
                "micro_batches": n,
                "micro_batch_time_s": t,
            }
            for r, (n, t) in enumerate(
                zip(rec.micro_batches, rec.seconds_per_micro_batch, strict=True)
            )
        ],
    }


def main(args: argparse.Namespace) -> int:
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(args.threads)
    kinds = os.environ.get("SHOAL_WORKER_KINDS", ",".join(["native"] * world)).split(",")
    priors = [float(x) for x in os.environ.get("SHOAL_WORKER_PRIORS", "").split(",") if x]
    pacer = Pacer(float(os.environ.get("SHOAL_SLOWDOWN", "1")))
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
    options = parse_options(args.option)
    job = build_job(load_job_file(args.job), options, args.seed)
    trainer = Trainer(
        job, rank, world, args.consistency, device, priors or None, pacer, args.replan_every
    )
    out = prepare_out_dir(args.out) if rank == 0 else pathlib.Path(args.out)
    quiet = os.environ.get("SHOAL_QUIET") == "1"
    writer = MetricsWriter(out) if rank == 0 else None
    progress = Progress(args.steps) if rank == 0 and not quiet else None
    start = time.perf_counter()
    while trainer.step < args.steps:
        rec = trainer.train_step()
        if writer:
            row = step_metrics(rec, trainer, kinds, time.perf_counter() - start)
            writer.write(row)
            if progress:
                progress.update(trainer.step, rec.loss, row["samples_per_s"])
    wall_s = time.perf_counter() - start
    digest = state_sha256(trainer.model, trainer.optimizer)
    if rank == 0:
        writer.close()
        if progress:
            progress.close()
        fp = job_fingerprint(args.job, options, job, args.consistency, trainer.model)
        ckpt = save_checkpoint(str(out / "checkpoints"), trainer.step, training_state(trainer), fp)
        write_json_atomic(
            out / "result.json",
            {
                "final_step": trainer.step,
                "state_sha256": digest,
                "wall_time_s": wall_s,
                "samples_per_s": trainer.samples_seen / wall_s,
                "consistency": args.consistency,
                "workers": kinds,
                "checkpoint": ckpt,
                "fingerprint": fp,
            },
        )
    if world > 1:
        dist.destroy_process_group()
    return 0
