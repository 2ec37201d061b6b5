"""This host's speed on the job, measured before any worker starts.

The autoscaler checks a goal's feasibility (an impossible deadline, a budget below one step)
before it launches anything, and that needs seconds per micro-batch: a few forward/backward
passes of the job itself here (or `--host-s`, the emulation's fixed yardstick, when given).
"""

from __future__ import annotations

import statistics
import time


def estimate_host_s(job, config) -> float:
    """Wall seconds of one forward/backward micro-batch of `job` on this host (the median of
    three, after one warm-up), before any worker runs: the feasibility check needs a speed."""
    if config.emulation.host_s is not None:
        return config.emulation.host_s
    import torch
    from torch.utils.data import default_collate

    from shoal.plan import micro_batch_seed
    from shoal.runtime.built import built_model
    from shoal.runtime.precision import forward_backward
    from shoal.runtime.trainer import seed_everything

    seed_everything(micro_batch_seed(job.seed, -1, 0))  # as a worker (any seed in Job's range)
    model = built_model(job, torch.device("cpu"))
    collate = job.collate_fn or default_collate
    batch = collate([job.dataset[i] for i in range(job.micro_batch_size)])
    times = []
    threads = torch.get_num_threads()
    # with the workers' threads: torch's default (one per core) on a loaded host timed a
    # micro-batch at 310 ms where a worker takes 1.6 ms, and called a 2 h deadline impossible
    torch.set_num_threads(config.threads)
    try:
        for _ in range(4):
            start = time.perf_counter()
            forward_backward(job, model, batch, torch.device("cpu"))
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times[1:])
