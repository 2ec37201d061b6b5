"""A run's configuration, typed: what `shoal run` and the torchrun entry accept, checked once.

Each flag is defined once, as a dataclass field whose metadata (`flag`, `help`, `metavar`,
`choices`) the CLI turns into an argparse option (`shoal.cli.flags`). A configuration crosses
from the launcher to a worker process as JSON in one environment variable (`SHOAL_CONFIG`,
`to_env` / `from_env`), so no argv is built by hand. Validation lives in `__post_init__`: a bad
value fails with one line naming the flag, in the launcher, before any worker starts.
Pure: no torch, no argparse.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from shoal.errors import UserError

CONFIG_ENV = "SHOAL_CONFIG"


def _flag(flag: str, help: str, **extra) -> dict:
    return {"flag": flag, "help": help, **extra}


def _at_least(value: float | None, low: float, flag: str) -> None:
    if value is not None and not value >= low:  # `not >=` also refuses NaN
        raise UserError(f"{flag} must be >= {low:g}, got {value}")


@dataclass(frozen=True)
class CheckpointConfig:
    """Durable checkpoints: their cadence (by steps and by seconds) and where they go.

    By default one is written every 10 minutes (and on Ctrl-C, SIGTERM and when the last
    worker leaves), so that losing every worker costs minutes of training, not the run."""

    every: int = field(
        default=0,
        metadata=_flag(
            "--checkpoint-every",
            "durable checkpoint cadence in steps (0: only at the end)",
            metavar="STEPS",
        ),
    )
    seconds: float = field(
        default=600.0,
        metadata=_flag(
            "--checkpoint-seconds",
            "durable checkpoint cadence in seconds (default 600; 0: off)",
            metavar="SECONDS",
        ),
    )
    dir: str | None = field(
        default=None,
        metadata=_flag(
            "--checkpoint-dir",
            "directory or fsspec URL for checkpoints (default: OUT/checkpoints)",
            metavar="DIR|URL",
        ),
    )

    def __post_init__(self) -> None:
        _at_least(self.every, 0, "--checkpoint-every")
        _at_least(self.seconds, 0, "--checkpoint-seconds")


@dataclass(frozen=True)
class EmulationConfig:
    """How a CPU worker emulates a device kind: run `slowdown` times slower than measured, or
    (a fixed yardstick for benchmarks) take `host_s` seconds per micro-batch at slowdown 1.
    Not flags: `shoal run` sets the slowdown per worker from the catalog; a torchrun user or a
    bench sets SHOAL_SLOWDOWN / SHOAL_EMULATED_HOST_S (see docs/environment.md)."""

    slowdown: float = 1.0
    host_s: float | None = None

    def __post_init__(self) -> None:
        # the same bounds as the Pacer's, checked here so that `shoal run` refuses them up front
        if not self.slowdown >= 1.0:
            raise UserError(f"SHOAL_SLOWDOWN (slowdown) must be >= 1, got {self.slowdown}")
        if self.host_s is not None and not self.host_s > 0:
            raise UserError(f"SHOAL_EMULATED_HOST_S must be > 0 seconds, got {self.host_s}")

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> EmulationConfig:
        env = os.environ if environ is None else environ
        try:
            slowdown = float(env.get("SHOAL_SLOWDOWN") or 1.0)
            fixed = env.get("SHOAL_EMULATED_HOST_S")
            host_s = float(fixed) if fixed else None
        except ValueError as exc:
            raise UserError(f"SHOAL_EMULATED_HOST_S / SHOAL_SLOWDOWN: {exc}") from None
        return cls(slowdown, host_s)


@dataclass(frozen=True)
class BatchConfig:
    """Adaptive global batch size: the policy deciding it and its knobs. A field left unset
    (None) takes the job's value (`Job.batch_policy`, `Job.batch_options`), else the default
    named in its help. The policy itself is built, and its knobs checked, by
    `shoal.control.batch_policy.make_policy`, in the launcher before any worker starts."""

    policy: str | None = field(
        default=None,
        metadata=_flag(
            "--batch-policy",
            "global batch policy: fixed, jabas, pollux, ... (default: the job's, else fixed)",
            metavar="NAME",
        ),
    )
    bounds: str | None = field(
        default=None,
        metadata=_flag(
            "--batch-bounds",
            "global batch bounds in samples, multiples of the micro-batch size "
            "(default: one micro-batch to the larger of an epoch and the job's batch)",
            metavar="LOW:HIGH",
        ),
    )
    every: int | None = field(
        default=None,
        metadata=_flag(
            "--batch-every",
            "decide the batch (and measure gradient similarity) every P steps (default 100)",
            metavar="P",
        ),
    )
    lr_scaling: str | None = field(
        default=None,
        metadata=_flag(
            "--lr-scaling",
            "learning-rate rule as the batch changes: none, linear, sqrt, adascale (default none)",
            metavar="RULE",
        ),
    )
    reference: str | None = field(
        default=None,
        metadata=_flag(
            "--batch-reference",
            "device kinds whose priors give the policy's throughput model, the same on any "
            "layout (default: shoal run's --workers; under torchrun one worker)",
            metavar="KINDS",
        ),
    )
    options: tuple[str, ...] = field(
        default=(),
        metadata=_flag(
            "--batch-option",
            "a policy parameter, e.g. gamma=0.1, alpha=0.1 (repeatable)",
            metavar="KEY=VALUE",
        ),
    )

    def __post_init__(self) -> None:
        _at_least(self.every, 1, "--batch-every")
        object.__setattr__(self, "options", tuple(self.options))


@dataclass(frozen=True)
class SlowLinkConfig:
    """Training over slow links between sites (issue 15). Local-update mode (`--local-steps H`,
    DiLoCo): every site takes H optimizer steps on its own exact sum, then one outer Nesterov
    step on the sites' averaged pseudo-gradient (`shoal.runtime.local_update`). Unset: every
    step is one exact sum over the whole group, as without this block."""

    local_steps: int | None = field(
        default=None,
        metadata=_flag(
            "--local-steps",
            "local-update mode: H inner steps per site, then one outer step (default: off)",
            metavar="H",
        ),
    )
    outer_lr: float = field(
        default=0.7,
        metadata=_flag(
            "--outer-lr", "local-update mode: outer learning rate (default 0.7)", metavar="LR"
        ),
    )
    outer_momentum: float = field(
        default=0.9,
        metadata=_flag(
            "--outer-momentum",
            "local-update mode: outer Nesterov momentum (default 0.9)",
            metavar="MU",
        ),
    )

    def __post_init__(self) -> None:
        # the same words as control.bandwidth.validate_slow_link (config imports no control)
        h = self.local_steps
        if h is not None and (int(h) != h or h < 1):
            raise UserError(f"--local-steps: local steps H must be an integer >= 1, got {h}")
        if not self.outer_lr > 0:
            raise UserError(f"--outer-lr must be > 0, got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:
            raise UserError(f"--outer-momentum must be in [0, 1), got {self.outer_momentum}")


@dataclass(frozen=True)
class RunConfig:
    """What one worker process needs to train a job: shared by every worker of a run."""

    job: str = field(metadata=_flag("job", "job file defining make_job(**options)"))
    steps: int = field(
        metadata=_flag("--steps", "number of optimizer steps", metavar="N", required=True)
    )
    out: str = field(
        metadata=_flag(
            "--out", "run directory for metrics, result, checkpoints", metavar="DIR", required=True
        )
    )
    consistency: str = field(
        default="exact",
        metadata=_flag(
            "--consistency",
            "exact: the same bits on any group; fast: a float all-reduce like DDP",
            choices=("exact", "fast"),
        ),
    )
    seed: int | None = field(
        default=None, metadata=_flag("--seed", "override the job's seed", metavar="N")
    )
    options: tuple[str, ...] = field(
        default=(),
        metadata=_flag(
            "--option", "passed to make_job (repeatable)", metavar="KEY=VALUE", short="-o"
        ),
    )
    replan_every: int = field(
        default=5, metadata=_flag("--replan-every", "re-plan every N steps", metavar="N")
    )
    max_micro_batches: int | None = field(
        default=None,
        metadata=_flag(
            "--max-micro-batches",
            "at most N micro-batches per worker per step (e.g. a memory limit)",
            metavar="N",
        ),
    )
    threads: int = field(
        default=1,
        metadata=_flag(
            "--threads",
            "intra-op threads per worker (pinned: kernels may sum differently with another "
            "thread count)",
            metavar="N",
        ),
    )
    peer_timeout_s: float = field(
        default=30.0,
        metadata=_flag(
            "--peer-timeout",
            "seconds a silent peer is waited for before it is declared lost (a stalled worker)",
            metavar="SECONDS",
        ),
    )
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume: bool = field(
        default=False,
        metadata=_flag("--resume", "continue from the newest valid checkpoint of this job"),
    )
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    on_nonfinite: str = field(
        default="stop",
        metadata=_flag(
            "--on-nonfinite",
            "a NaN or infinite loss or gradient: stop the run there (keeping the last finite "
            "state), or skip the step's update as AMP's grad scaler does",
            choices=("stop", "skip"),
        ),
    )
    link: SlowLinkConfig = field(default_factory=SlowLinkConfig)

    def __post_init__(self) -> None:
        _at_least(self.steps, 1, "--steps")
        _at_least(self.threads, 1, "--threads")
        _at_least(self.replan_every, 1, "--replan-every")
        _at_least(self.max_micro_batches, 1, "--max-micro-batches")
        if not self.peer_timeout_s > 0:
            raise UserError(f"--peer-timeout must be > 0 seconds, got {self.peer_timeout_s}")
        if self.on_nonfinite not in ("stop", "skip"):
            raise UserError(f"--on-nonfinite must be stop or skip, got {self.on_nonfinite!r}")
        object.__setattr__(self, "options", tuple(self.options))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        raw = json.loads(text)
        raw["checkpoint"] = CheckpointConfig(**raw["checkpoint"])
        raw["emulation"] = EmulationConfig(**raw["emulation"])
        raw["batch"] = BatchConfig(**raw.get("batch", {}))
        raw["link"] = SlowLinkConfig(**raw.get("link", {}))
        return cls(**raw)

    def to_env(self) -> dict[str, str]:
        """The environment that carries this configuration to a worker process."""
        return {CONFIG_ENV: self.to_json()}

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> RunConfig | None:
        """The configuration a launcher handed this process, or None (started by torchrun)."""
        text = (os.environ if environ is None else environ).get(CONFIG_ENV)
        return cls.from_json(text) if text else None


@dataclass(frozen=True)
class LaunchConfig:
    """`shoal run`'s own flags, beside the workers' RunConfig."""

    workers: str = field(
        metadata=_flag(
            "--workers",
            "device kinds, one per worker: e.g. v100,k80,k80 or 2xv100,k80",
            metavar="SPEC",
            required=True,
        )
    )
    events: str | None = field(
        default=None,
        metadata=_flag(
            "--events",
            "injected events, e.g. 'step 10: kill 1; step 20: add k80; step 35: notice 0 30s'",
            metavar="FILE|LIST",
        ),
    )
    verbose: bool = field(
        default=False,
        metadata=_flag(
            "--verbose", "show the traceback of an error raised in the job's code", short="-v"
        ),
    )
