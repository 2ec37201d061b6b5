"""The yardstick: torch DistributedDataParallel on the same job, data order and randomness.

Rank r of W computes micro-batches r*k .. r*k+k-1 (k = M/W, DDP's equal split), accumulating
under `no_sync()` and letting DDP all-reduce on the last one, each micro-batch reading the
same samples and seeded the same way as in shoal. Used by the DDP-agreement test and by the
benchmarks; an optional slowdown pads a rank's micro-batches like an emulated device.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import statistics
import time
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from shoal.job import build_job, load_job_file
from shoal.plan import DataOrder, data_seed, micro_batch_seed
from shoal.runtime.pacing import Pacer
from shoal.runtime.state import state_sha256
from shoal.runtime.trainer import seed_everything


def ddp_worker(
    rank: int,
    world_size: int,
    port: int,
    job_path: str,
    options: dict,
    steps: int,
    out_json: str,
    slowdowns: list[float] | None = None,
    host_s: float | None = None,
    threads: int = 1,
) -> None:
    """One DDP rank (a torch.multiprocessing.spawn target); rank 0 writes `out_json`."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    dist.init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=120)
    )
    job = build_job(load_job_file(job_path), options, None)
    m = job.num_micro_batches
    if m % world_size:
        raise ValueError(f"DDP's equal split needs M={m} divisible by {world_size}")
    k = m // world_size
    pacer = Pacer(slowdowns[rank] if slowdowns else 1.0, host_s)  # as shoal's workers pace
    seed_everything(micro_batch_seed(job.seed, -1, 0))
    with warnings.catch_warnings():  # the flag is being renamed; its meaning is unchanged
        warnings.simplefilter("ignore", FutureWarning)
        model = DistributedDataParallel(job.model().train(), broadcast_buffers=True)
    optimizer = job.optimizer(model.parameters())
    scheduler = job.lr_scheduler(optimizer) if job.lr_scheduler else None
    order = DataOrder(len(job.dataset), job.micro_batch_size, job.seed, job.shuffle)
    collate = job.collate_fn or torch.utils.data.default_collate
    losses, step_times = [], []
    for step in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        # slot 0: this step's loss sum; slot 1 + r: rank r's seconds per micro-batch
        shared = torch.zeros(1 + world_size, dtype=torch.float64)
        compute_s = []  # this rank's micro-batches at host speed, without the all-reduce
        computed = time.perf_counter()
        for i, j in enumerate(range(rank * k, rank * k + k)):
            t0 = time.perf_counter()
            ids = order.sample_ids(step * job.global_batch_size, j)
            seed_everything(data_seed(job.seed, step, j))
            batch = collate([job.dataset[s] for s in ids])
            seed_everything(micro_batch_seed(job.seed, step, j))
            sync = contextlib.nullcontext() if i == k - 1 else model.no_sync()
            with sync:
                loss = job.loss_fn(model, batch)
                (loss / k).backward()  # DDP then averages over ranks: the mean over M
            shared[0] += float(loss.detach())
            if i < k - 1 or k == 1:
                compute_s.append(time.perf_counter() - t0)
        shared[1 + rank] = statistics.median(compute_s)  # as shoal's trainer measures it
        # An emulated slower rank waits out its kind's time after its micro-batches, as
        # shoal's do. Its all-reduce ran inside that time, so DDP's appears free: a bias in
        # DDP's favour, while a rank that slept first would run its last micro-batch cold.
        pacer.pad(k, time.perf_counter() - computed)
        optimizer.step()
        if scheduler:
            scheduler.step()
        dist.all_reduce(shared)  # bookkeeping, 8 bytes a rank; shoal's rides its collective
        step_times.append(time.perf_counter() - start)
        losses.append(float(shared[0]) / m)
        pacer.observe(float(shared[1:].min()))  # paced, like shoal, by the fastest rank
    digest = state_sha256(model.module, optimizer)
    if rank == 0:
        with open(out_json, "w") as f:
            json.dump({"losses": losses, "step_times_s": step_times, "state_sha256": digest}, f)
    dist.barrier()  # nobody tears gloo down while a peer still talks to it
    dist.destroy_process_group()
