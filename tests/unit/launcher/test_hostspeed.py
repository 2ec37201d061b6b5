"""The host-speed estimate the autoscaler's feasibility check uses, before any worker starts."""

from types import SimpleNamespace

import torch
from torch import nn

from shoal.config import RunConfig
from shoal.launcher.hostspeed import estimate_host_s


def test_the_estimate_runs_with_the_workers_threads_and_restores_the_launchers():
    """Timed with torch's default threads (one per core), a loaded host measured 310 ms per
    micro-batch where a one-thread worker takes 1.6 ms, and a feasible deadline was refused."""
    seen = []

    def loss_fn(model, batch):
        seen.append(torch.get_num_threads())
        return model(batch[0]).sum()

    job = SimpleNamespace(
        seed=0,
        model=lambda: nn.Linear(4, 2),
        collate_fn=None,
        dataset=[(torch.ones(4), 0)] * 8,
        micro_batch_size=4,
        loss_fn=loss_fn,
        autocast=None,
    )
    before = torch.get_num_threads()
    threads = 1 if before != 1 else 2  # a value other than the launcher's own
    config = RunConfig(job="job.py", steps=1, out="unused", threads=threads)
    assert estimate_host_s(job, config) > 0
    assert seen == [threads] * 4
    assert torch.get_num_threads() == before
