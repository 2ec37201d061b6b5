"""The yardstick: torch DistributedDataParallel on the same job, data order and randomness.

Rank r of W computes micro-batches r*k .. r*k+k-1 (k = M/W, DDP's equal split), accumulating
under `no_sync()` and letting DDP all-reduce on the last one, each micro-batch reading the
same samples and seeded the same way as in shoal. Used by the DDP-agreement test and by the
benchmarks. The loop is a plain DDP loop: nothing but DDP's own all-reduce crosses ranks
during a step (the losses are summed across ranks once, after the last step).

An optional slowdown makes a rank an emulated slower device, paced like shoal's emulated
workers (see pacing.py) against a fixed host time per micro-batch: the rank computes its
micro-batches back to back, and DDP's last gradient bucket goes to the network only once the
kind's time for them has passed, as a real slower device's would. (Waiting after the
backward instead would let DDP's all-reduce run inside the wait, for free.)
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from shoal.job import build_job, load_job_file
from shoal.plan import DataOrder, data_seed, micro_batch_seed
from shoal.runtime.pacing import Pacer
from shoal.runtime.state import state_sha256
from shoal.runtime.trainer import batch_reader, seed_everything


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
    if slowdowns and host_s is None:
        raise ValueError("an emulated slowdown needs host_s, the host's time per micro-batch")
    pacer = Pacer(slowdowns[rank] if slowdowns else 1.0, host_s)
    seed_everything(micro_batch_seed(job.seed, -1, 0))
    with warnings.catch_warnings():  # the flag is being renamed; its meaning is unchanged
        warnings.simplefilter("ignore", FutureWarning)
        model = DistributedDataParallel(job.model().train(), broadcast_buffers=True)
    computing_since = 0.0  # this step's, on this rank

    def paced_allreduce(group, bucket):
        """DDP's own all-reduce, the last bucket held back until the emulated device has
        finished the step's micro-batches (earlier buckets overlap its backward, as on a
        real device)."""
        if bucket.is_last():
            pacer.pad(k, time.perf_counter() - computing_since)
        return allreduce_hook(group, bucket)

    if pacer.slowdown != 1.0:
        model.register_comm_hook(None, paced_allreduce)
    optimizer = job.optimizer(model.parameters())
    scheduler = job.lr_scheduler(optimizer) if job.lr_scheduler else None
    order = DataOrder(len(job.dataset), job.micro_batch_size, job.seed, job.shuffle)
    read = batch_reader(job.dataset, job.collate_fn)
    loss_sums = torch.zeros(steps, dtype=torch.float64)  # this rank's, per step
    step_times = []
    for step in range(steps):
        start = computing_since = time.perf_counter()
        optimizer.zero_grad()
        for i, j in enumerate(range(rank * k, rank * k + k)):
            ids = order.sample_ids(step * job.global_batch_size, j)
            seed_everything(data_seed(job.seed, step, j))
            batch = read(ids)
            seed_everything(micro_batch_seed(job.seed, step, j))
            sync = contextlib.nullcontext() if i == k - 1 else model.no_sync()
            with sync:
                loss = job.loss_fn(model, batch)
                (loss / k).backward()  # DDP then averages over ranks: the mean over M
            loss_sums[step] += float(loss.detach())
        optimizer.step()
        if scheduler:
            scheduler.step()
        step_times.append(time.perf_counter() - start)
    dist.all_reduce(loss_sums)
    losses = (loss_sums / m).tolist()
    digest = state_sha256(model.module, optimizer)
    if rank == 0:
        with open(out_json, "w") as f:
            json.dump({"losses": losses, "step_times_s": step_times, "state_sha256": digest}, f)
    dist.barrier()  # every rank is done with gloo, and rank 0's file is written
    # End the spawned process here, without tearing gloo and DDP down: nothing is left to
    # release in a process about to exit, and that teardown has aborted a rank under load
    # ("terminate called without an active exception"), failing a run whose work was done.
    os._exit(0)
