"""Jobs: what a trace says about a job (`JobSpec`) and what the simulator tracks (`JobRun`).

A job has an arrival time, an application (its measured profile), a requested number of GPUs, a
batch size, an amount of work (progress in M0-iterations, see `shoal.perf.profiles`) and is
either elastic (may run on any number of GPUs, shrinks on revocation) or a gang (runs on exactly
its requested GPUs or not at all; a revocation restarts it from its last checkpoint).
`JobRun` keeps progress lazily: between events a job advances at a constant rate, starting at
`resume_s` (a start, restart or rescale stalls it until then).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobSpec:
    name: str
    arrival_s: float
    app: str
    requested_gpus: int
    batch_size: int
    total_progress: float
    elastic: bool = True
    preferred_kind: str | None = None
    mixed_kinds_ok: bool = True  # may run across GPU kinds (EasyScale's het-determinism flag)

    def __post_init__(self) -> None:
        if self.arrival_s < 0:
            raise ValueError(f"job {self.name}: arrival time must be >= 0")
        if self.requested_gpus < 1 or self.batch_size < 1 or self.total_progress <= 0:
            raise ValueError(f"job {self.name}: GPUs, batch size and work must be positive")


@dataclass
class JobRun:
    spec: JobSpec
    progress: float = 0.0
    rate: float = 0.0  # M0-iterations per second while running
    updated_s: float = 0.0
    resume_s: float = 0.0  # no progress before this time (start/rescale overhead)
    alloc: dict[int, int] = field(default_factory=dict)  # node id -> GPUs (use set_alloc)
    gpus: int = 0  # total GPUs in `alloc`
    counts: tuple[tuple[str, int], ...] = ()
    num_nodes: int = 0
    batch_size: float = 0.0
    parallelism: int | None = None
    alloc_since_s: float = 0.0
    start_s: float | None = None
    finish_s: float | None = None
    gpu_s: float = 0.0  # attained service, GPU-seconds
    restarts: int = 0
    revocations: int = 0
    lost_progress: float = 0.0
    version: int = 0  # bumps on every rate change; stale completion events are ignored
    ran_before: bool = False
    ckpt_s: float = 0.0
    next_refresh: float = 0.0  # progress at which the rate is re-evaluated
    data: dict = field(default_factory=dict)  # per-policy scratch (e.g. Tiresias queue)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def num_gpus(self) -> int:
        return self.gpus

    def set_alloc(self, alloc: dict[int, int]) -> None:
        self.alloc = alloc
        self.gpus = sum(alloc.values())

    @property
    def running(self) -> bool:
        return bool(self.alloc)

    def advance(self, now_s: float) -> None:
        """Bring progress and attained service up to `now_s`."""
        if now_s <= self.updated_s:
            return
        if self.alloc:
            self.gpu_s += self.num_gpus * (now_s - max(self.updated_s, self.alloc_since_s))
            start = max(self.updated_s, self.resume_s)
            if now_s > start:
                self.progress = min(
                    self.spec.total_progress, self.progress + self.rate * (now_s - start)
                )
        self.updated_s = now_s
