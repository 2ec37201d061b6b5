"""Step time on one GPU: shoal exact vs shoal fast vs a plain PyTorch loop, same job and batch.

    python bench/gpu_step_time.py [--steps 40] [--repeats 2] [--job conv|transformer]
        [--micro-batch-size b --global-batch-size B]

What exact mode costs on a GPU: its deterministic kernels and its exact gradient sum (each
micro-batch's gradient converted to fixed point and added) against the loop a user would
write: M micro-batches accumulated with backward, one optimizer step, one host sync per step.
The plain loop runs twice, with torch's default kernels and with the deterministic ones exact
mode selects, to tell the two costs apart. Each side runs from a fresh interpreter; a step's
time is its period, start to start, and a run's figure its median after the warm-up. Needs a
CUDA GPU (the sides run on GPU 0); prints one JSON object per job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from _common import (
    JOBS,
    add_step_flags,
    as_options,
    check_runs,
    job_options,
    per_repeat,
    rotation,
    shoal_step_times,
    steady,
)

CONFIGS = {
    "conv": {"micro_batch_size": 32, "global_batch_size": 256},
    "transformer": {"micro_batch_size": 32, "global_batch_size": 256},
}
SIDES = ["exact", "fast", "torch", "torch-deterministic"]


def plain_loop(job_path: str, options: dict, steps: int, deterministic: bool) -> list[float]:
    """The user's own loop on GPU 0: step periods in seconds."""
    from shoal.job import build_job, load_job_file
    from shoal.plan.order import DataOrder
    from shoal.runtime.trainer import batch_reader, to_device

    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    device = torch.device("cuda", 0)
    job = build_job(load_job_file(job_path), options, None)
    model = job.model().to(device).train()
    optimizer = job.optimizer(list(model.parameters()))
    order = DataOrder(len(job.dataset), job.micro_batch_size, job.seed, job.shuffle)
    read = batch_reader(job.dataset, job.collate_fn)
    m = job.num_micro_batches
    starts = []
    for step in range(steps + 1):
        torch.cuda.synchronize()
        starts.append(time.perf_counter())
        optimizer.zero_grad()
        total = torch.zeros((), device=device)
        for j in range(m):
            batch = to_device(read(order.sample_ids(step * job.global_batch_size, j)), device)
            loss = job.loss_fn(model, batch)
            (loss / m).backward()
            total += loss.detach()
        optimizer.step()
        float(total)  # the loop's one host sync: its loss for the log
    return [b - a for a, b in zip(starts, starts[1:])]


def side_times(side: str, job: str, options: dict, steps: int) -> list[float]:
    if side in ("exact", "fast"):
        return shoal_step_times(job, ["v100"], steps, as_options(options), consistency=side)
    args = json.dumps([job, options, steps, side == "torch-deterministic"])
    done = subprocess.run(
        [sys.executable, __file__, "--plain", args], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"the plain loop failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_step_flags(p, CONFIGS, repeats=2)
    p.add_argument("--plain", help=argparse.SUPPRESS)  # internal: one plain-loop run
    args = p.parse_args()
    if args.plain:
        print(json.dumps(plain_loop(*json.loads(args.plain))))
        return
    check_runs(p, args)
    jobs = job_options(p, args, CONFIGS, world=1)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU: torch sees none")
    for name, options in jobs.items():
        medians = {side: [] for side in SIDES}
        for repeat in range(args.repeats):
            for side in rotation(SIDES, repeat):
                times = side_times(side, str(JOBS[name]), options, args.steps)
                medians[side].append(steady(times, args.warmup))
        torch_ms = statistics.median(medians["torch"])
        print(
            json.dumps(
                {
                    "job": name,
                    **options,
                    "gpu": torch.cuda.get_device_name(0),
                    "torch": torch.__version__,
                    "step_ms": {
                        s: round(1e3 * statistics.median(v), 2) for s, v in medians.items()
                    },
                    "vs_torch": {
                        s: [round(r, 3) for r in per_repeat(v, medians["torch"])]
                        for s, v in medians.items()
                        if s != "torch"
                    },
                    "torch_step_ms": round(1e3 * torch_ms, 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
