"""The DDP side of `bench/slowlink_train.py`: one torchrun worker training a shoal job with torch
DistributedDataParallel over gloo, optionally with torch's PowerSGD comm hook.

Rank r of W computes micro-batches r*k .. r*k+k-1 of each step (k = M/W), reading the same
samples as shoal would (the job's DataOrder), and DDP all-reduces on the last one. Every
`--eval-every` steps the model's state is copied to memory (outside the step's clock); at the end
rank 0 writes the copies (`snap-<step>.pt`) and `ddp.json` (per-step seconds) into --out, where
the driver evaluates them. A plain DDP loop: only DDP's own collectives cross the slow link.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from shoal.errors import UserError
from shoal.job import build_job, load_job_file, parse_options
from shoal.plan import DataOrder, data_seed, micro_batch_seed
from shoal.runtime.trainer import batch_reader, seed_everything


def make_ddp(job, powersgd_rank: int) -> DistributedDataParallel:
    seed_everything(micro_batch_seed(job.seed, -1, 0))  # the same initial weights as shoal
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        # PowerSGD: one bucket. With DDP's default buckets (1 MB first, then 25 MB) the two
        # ranks' P-matrix all-reduces differed in size after DDP's bucket rebuild (gloo aborts:
        # "received data size doesn't match expected size"); dense DDP keeps the defaults
        buckets = {"bucket_cap_mb": 1024} if powersgd_rank else {}
        model = DistributedDataParallel(job.model().train(), **buckets)
    if powersgd_rank:
        # DDP rebuilds its buckets after the first iteration: PowerSGD starts after a few
        # plain all-reduces (torch's own advice when error feedback is on)
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=powersgd_rank, start_powerSGD_iter=3
        )
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("job")
    parser.add_argument(
        "--option", "-o", action="append", default=[], help="a job option KEY=VALUE, repeatable"
    )
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--eval-every", type=int, required=True)
    parser.add_argument("--powersgd", type=int, default=0, help="PowerSGD rank (0: off)")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()
    if not pathlib.Path(args.job).is_file():
        parser.error(f"no job file {args.job!r}")
    for flag, value, low in (
        ("--steps", args.steps, 1),
        ("--eval-every", args.eval_every, 1),
        ("--powersgd", args.powersgd, 0),
    ):
        if value < low:
            parser.error(f"{flag} must be at least {low}, not {value}")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out: {args.out} is not a directory")
    try:
        options = parse_options(args.option)
    except UserError as exc:
        parser.error(f"--option: {exc}")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    job = build_job(load_job_file(args.job), options, None)
    m = job.num_micro_batches
    if m % world:
        raise SystemExit(f"DDP's equal split needs M={m} divisible by {world}")
    k = m // world
    model = make_ddp(job, args.powersgd)
    optimizer = job.optimizer(model.parameters())
    scheduler = job.lr_scheduler(optimizer) if job.lr_scheduler else None
    order = DataOrder(len(job.dataset), job.micro_batch_size, job.seed, job.shuffle)
    read = batch_reader(job.dataset, job.collate_fn)
    snaps, step_times = {}, []
    for step in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        for i, j in enumerate(range(rank * k, rank * k + k)):
            seed_everything(data_seed(job.seed, step, j))
            batch = read(order.sample_ids(step * job.global_batch_size, j))
            seed_everything(micro_batch_seed(job.seed, step, j))
            sync = contextlib.nullcontext() if i == k - 1 else model.no_sync()
            with sync:
                (job.loss_fn(model, batch) / k).backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        step_times.append(time.perf_counter() - start)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            snaps[step + 1] = {n: t.detach().clone() for n, t in model.module.state_dict().items()}
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        for step, state in snaps.items():
            torch.save(state, args.out / f"snap-{step:09d}.pt")
        (args.out / "ddp.json").write_text(json.dumps({"step_times_s": step_times}))
    dist.barrier()
    os._exit(0)  # no gloo/DDP teardown in a process about to exit (see ddp_yardstick.py)


if __name__ == "__main__":
    main()
