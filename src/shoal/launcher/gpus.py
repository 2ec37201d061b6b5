"""Which GPU each local worker of `shoal run` trains on.

`shoal run` starts every worker on this machine. Where CUDA shows GPUs, a worker needs one of
its own (NCCL runs one rank per GPU; two workers handed the same one failed with "invalid
device ordinal" or would share it), so the run trains on the GPUs only if it never holds more
workers at once than there are GPUs:
- the initial `--workers` start together: at most one per GPU;
- an `--events` add waits for a GPU to be free (a worker's process has ended), as it waits
  past the host's process limit;
- with `--provider`, a server's replacement may boot during its notice, so up to twice
  `--max-servers` processes may be alive: at most that many GPUs' worth.
Otherwise every worker trains on the CPU (gloo) and the console says why: one group has one
backend, so it is all or none. A worker is pinned to its GPU through CUDA_VISIBLE_DEVICES
(inside it, `cuda:0`); a CPU worker gets it empty. On a machine without CUDA nothing changes.
Under torchrun (`shoal torchrun`) none of this applies: the local rank picks the GPU, as
torchrun users expect (`runtime.loop`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from shoal.console import counted


def visible_gpus() -> list[str]:
    """The GPUs CUDA shows this process, as CUDA_VISIBLE_DEVICES names them ([] without)."""
    import torch

    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    if shown == "" or not torch.cuda.is_available():  # "": hidden after CUDA was asked
        return []
    count = torch.cuda.device_count()
    if shown is None:
        return [str(i) for i in range(count)]
    return [s.strip() for s in shown.split(",") if s.strip()][:count]


def most_at_once(initial: int, max_servers: int | None) -> int:
    """The most worker processes a run may hold at once on GPUs (see the module docstring):
    the initial workers, or with a provider twice --max-servers (adds wait for a free GPU)."""
    return initial if max_servers is None else max(initial, 2 * max_servers)


class GpuSlots:
    """The run's GPUs and which worker holds each. `ids` empty: every worker on the CPU."""

    def __init__(self, gpus: list[str], at_once: int):
        self.shown = len(gpus)  # what CUDA shows (0: no CUDA, nothing to say or pin)
        self.ids = gpus if gpus and at_once <= len(gpus) else []
        self.at_once = at_once
        self.holder: dict[str, str] = {}  # GPU id -> worker id

    def note(self) -> str | None:
        """The console's word on where the workers train (None on a machine without CUDA)."""
        if not self.shown:
            return None
        if self.ids:
            return f"each worker on a GPU of its own ({self.shown} shown)"
        return (
            f"the workers train on the CPU: the run may hold {self.at_once} at once and CUDA "
            f"shows {counted(self.shown, 'GPU')} (one each is needed)"
        )

    def free(self, alive: Callable[[str], bool]) -> str | None:
        """A GPU no live worker holds (the lowest), or None: none, or the run is on the CPU."""
        return next(
            (g for g in self.ids if g not in self.holder or not alive(self.holder[g])), None
        )

    def waiting(self, alive: Callable[[str], bool]) -> bool:
        """Whether a new worker must wait for a GPU (the run is on GPUs and all are held)."""
        return bool(self.ids) and self.free(alive) is None

    def env(self, worker: str, alive: Callable[[str], bool]) -> dict[str, str]:
        """The environment that pins a new worker: its GPU (taken), or none (the CPU)."""
        if not self.shown:
            return {}
        if not self.ids:
            return {"CUDA_VISIBLE_DEVICES": ""}
        gpu = self.free(alive)
        if gpu is None:  # the callers wait for a free GPU first (`waiting`)
            raise RuntimeError(f"no free GPU for {worker}: all {len(self.ids)} are held")
        self.holder[gpu] = worker
        return {"CUDA_VISIBLE_DEVICES": gpu}
