"""A run's configuration, typed: what `shoal run` and the torchrun entry accept, checked once.

Each flag is defined once, as a dataclass field whose metadata (`flag`, `help`, `metavar`,
`choices`) the CLI turns into an argparse option (`shoal.cli.flags`). A configuration crosses
from the launcher to a worker process as JSON in one environment variable (`SHOAL_CONFIG`,
`to_env` / `from_env`), so no argv is built by hand. Validation lives in `__post_init__`: a bad
value fails with one line naming the flag, in the launcher, before any worker starts.
The provider's and the slow links' sections live in `provider.py` and `slowlink.py`, the field
helpers in `fields.py`. Pure: no torch, no argparse.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field

from shoal.config.fields import at_least, option
from shoal.config.provider import ProviderConfig
from shoal.config.slowlink import SlowLinkConfig
from shoal.errors import UserError

CONFIG_ENV = "SHOAL_CONFIG"
# --threads: a sanity bound on the flag, not a resource policy (OpenMP crashes the worker at a
# thread count it cannot create, e.g. 100000)
MAX_THREADS = 1024
# --seed: the range plan/order.py's seed mixer takes (16 signed bytes), as job.py's Job.seed
SEED_MIN, SEED_MAX = -(2**127), 2**127 - 1
# --peer-timeout: a day is generous for a stalled peer; past ~10^9 s the collectives' timeout
# overflows in torch (inf and 1e300 failed each worker with an OverflowError, 1e10 hung the run)
MAX_PEER_TIMEOUT_S = 86_400.0


@dataclass(frozen=True)
class CheckpointConfig:
    """Durable checkpoints: their cadence (by steps and by seconds) and where they go.

    By default one is written every 10 minutes (and on Ctrl-C, SIGTERM, SIGHUP and when the
    last worker leaves), so that losing every worker costs minutes of training, not the run."""

    every: int = field(
        default=0,
        metadata=option(
            "--checkpoint-every",
            "durable checkpoint cadence in steps (0: only at the end)",
            metavar="STEPS",
        ),
    )
    seconds: float = field(
        default=600.0,
        metadata=option(
            "--checkpoint-seconds",
            "durable checkpoint cadence in seconds (default 600; 0: off)",
            metavar="SECONDS",
        ),
    )
    dir: str | None = field(
        default=None,
        metadata=option(
            "--checkpoint-dir",
            "directory or fsspec URL for checkpoints (default: OUT/checkpoints)",
            metavar="DIR|URL",
        ),
    )

    keep: int = field(
        default=3,
        metadata=option(
            "--checkpoint-keep",
            "durable checkpoints kept, newest first (0: all of them)",
            metavar="K",
        ),
    )

    def __post_init__(self) -> None:
        at_least(self.every, 0, "--checkpoint-every")
        at_least(self.seconds, 0, "--checkpoint-seconds")
        at_least(self.keep, 0, "--checkpoint-keep")


@dataclass(frozen=True)
class EmulationConfig:
    """How a CPU worker emulates a device kind: run `slowdown` times slower than measured, or
    (a fixed yardstick for benchmarks) take `host_s` seconds per micro-batch at slowdown 1;
    and, for an emulated cluster whose gradient exchange is slower than loopback's, add
    `sync_s` seconds to every step. Not flags: `shoal run` sets the slowdown per worker from
    the catalog; a torchrun user or a bench sets SHOAL_SLOWDOWN / SHOAL_EMULATED_HOST_S /
    SHOAL_EMULATED_SYNC_S (see docs/environment.md)."""

    slowdown: float = 1.0
    host_s: float | None = None
    sync_s: float = 0.0  # the emulated cluster's gradient exchange: seconds added to each step

    def __post_init__(self) -> None:
        # the same bounds as the Pacer's, checked here so that `shoal run` refuses them up front
        if not self.slowdown >= 1.0:
            raise UserError(f"SHOAL_SLOWDOWN (slowdown) must be >= 1, got {self.slowdown}")
        if self.host_s is not None and not self.host_s > 0:
            raise UserError(f"SHOAL_EMULATED_HOST_S must be > 0 seconds, got {self.host_s}")
        if not self.sync_s >= 0:
            raise UserError(f"SHOAL_EMULATED_SYNC_S must be >= 0 seconds, got {self.sync_s}")

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> EmulationConfig:
        env = os.environ if environ is None else environ
        try:
            slowdown = float(env.get("SHOAL_SLOWDOWN") or 1.0)
            fixed = env.get("SHOAL_EMULATED_HOST_S")
            host_s = float(fixed) if fixed else None
            sync_s = float(env.get("SHOAL_EMULATED_SYNC_S") or 0.0)
        except ValueError as exc:
            raise UserError(
                f"SHOAL_EMULATED_HOST_S / SHOAL_EMULATED_SYNC_S / SHOAL_SLOWDOWN: {exc}"
            ) from None
        return cls(slowdown, host_s, sync_s)


@dataclass(frozen=True)
class BatchConfig:
    """Adaptive global batch size: the policy deciding it and its knobs. A field left unset
    (None) takes the job's value (`Job.batch_policy`, `Job.batch_options`), else the default
    named in its help. The policy itself is built, and its knobs checked, by
    `shoal.control.batch_policy.make_policy`, in the launcher before any worker starts; a knob
    given that the run's policy does not read (any, with the fixed policy) is refused there."""

    policy: str | None = field(
        default=None,
        metadata=option(
            "--batch-policy",
            "global batch policy: fixed, jabas, pollux, ... (default: the job's, else fixed)",
            metavar="NAME",
        ),
    )
    bounds: str | None = field(
        default=None,
        metadata=option(
            "--batch-bounds",
            "with an adaptive policy: global batch bounds in samples, multiples of the "
            "micro-batch size (default: one micro-batch to the larger of an epoch and the "
            "job's batch)",
            metavar="LOW:HIGH",
        ),
    )
    every: int | None = field(
        default=None,
        metadata=option(
            "--batch-every",
            "with an adaptive policy: decide the batch (and measure gradient similarity) every "
            "P steps (default 100)",
            metavar="P",
        ),
    )
    lr_scaling: str | None = field(
        default=None,
        metadata=option(
            "--lr-scaling",
            "with an adaptive policy: learning-rate rule as the batch changes: none, linear, "
            "sqrt, adascale (default none)",
            metavar="RULE",
        ),
    )
    reference: str | None = field(
        default=None,
        metadata=option(
            "--batch-reference",
            "with pollux or shoal: device kinds whose priors give the policy's throughput "
            "model, the same on any layout (default: shoal run's --workers; under torchrun one "
            "worker)",
            metavar="KINDS",
        ),
    )
    sync: float | None = field(
        default=None,
        metadata=option(
            "--batch-sync",
            "with pollux or shoal: per-step gradient synchronisation in the policy's throughput "
            "model, in micro-batch times of the reference's fastest kind (default 0; e.g. 1.4: "
            "a step's exchange takes 1.4 micro-batches' compute)",
            metavar="MICRO_BATCHES",
        ),
    )
    options: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "--batch-option",
            "with an adaptive policy: one of its parameters, e.g. gamma=0.1, alpha=0.1 "
            "(repeatable)",
            metavar="KEY=VALUE",
        ),
    )

    def __post_init__(self) -> None:
        at_least(self.every, 1, "--batch-every")
        at_least(self.sync, 0, "--batch-sync")
        if self.sync == math.inf:  # an exchange that never ends
            raise UserError(f"--batch-sync must be finite, got {self.sync}")
        object.__setattr__(self, "options", tuple(self.options))

    @property
    def effective_sync(self) -> float:
        """--batch-sync as a policy weighing throughput uses it: the flag's, else 0."""
        return 0.0 if self.sync is None else float(self.sync)

    def given_knobs(self) -> list[str]:
        """The flags of the knobs given, --batch-policy aside: a field left None (or no
        --batch-option) is "not given", so that a knob the run's policy does not read is
        refused or warned about (`runtime/batching.py` `check_batch`), not silently ignored."""
        return [
            f.metadata["flag"]
            for f in dataclasses.fields(self)
            if f.name != "policy" and getattr(self, f.name) not in (None, ())
        ]


@dataclass(frozen=True)
class RunConfig:
    """What one worker process needs to train a job: shared by every worker of a run."""

    job: str = field(metadata=option("job", "job file defining make_job(**options)"))
    steps: int = field(
        metadata=option("--steps", "number of optimizer steps", metavar="N", required=True)
    )
    out: str = field(
        metadata=option(
            "--out", "run directory for metrics, result, checkpoints", metavar="DIR", required=True
        )
    )
    consistency: str = field(
        default="exact",
        metadata=option(
            "--consistency",
            "exact: the same bits on any group; fast: a float all-reduce like DDP",
            choices=("exact", "fast"),
        ),
    )
    seed: int | None = field(
        default=None, metadata=option("--seed", "override the job's seed", metavar="N")
    )
    options: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "--option", "passed to make_job (repeatable)", metavar="KEY=VALUE", short="-o"
        ),
    )
    replan_every: int = field(
        default=5, metadata=option("--replan-every", "re-plan every N steps", metavar="N")
    )
    max_micro_batches: int | None = field(
        default=None,
        metadata=option(
            "--max-micro-batches",
            "at most N micro-batches per worker per step (e.g. a memory limit)",
            metavar="N",
        ),
    )
    threads: int = field(
        default=1,
        metadata=option(
            "--threads",
            "intra-op threads per worker (pinned: kernels may sum differently with another "
            "thread count)",
            metavar="N",
        ),
    )
    peer_timeout_s: float = field(
        default=30.0,
        metadata=option(
            "--peer-timeout",
            "seconds a silent peer is waited for before it is declared lost (a stalled worker)",
            metavar="SECONDS",
        ),
    )
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume: bool = field(
        default=False,
        metadata=option("--resume", "continue from the newest valid checkpoint of this job"),
    )
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    provider: ProviderConfig = field(default_factory=ProviderConfig)
    on_nonfinite: str = field(
        default="stop",
        metadata=option(
            "--on-nonfinite",
            "a NaN or infinite loss or gradient: stop the run there (keeping the last finite "
            "state), or skip the step's update as AMP's grad scaler does",
            choices=("stop", "skip"),
        ),
    )
    link: SlowLinkConfig = field(default_factory=SlowLinkConfig)

    def __post_init__(self) -> None:
        at_least(self.steps, 1, "--steps")
        at_least(self.threads, 1, "--threads")
        if self.threads > MAX_THREADS:
            raise UserError(f"--threads must be <= {MAX_THREADS}, got {self.threads}")
        at_least(self.replan_every, 1, "--replan-every")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            raise UserError(f"--seed must be in [-2**127, 2**127 - 1], got {self.seed}")
        at_least(self.max_micro_batches, 1, "--max-micro-batches")
        if not 0 < self.peer_timeout_s <= MAX_PEER_TIMEOUT_S:
            raise UserError(
                f"--peer-timeout must be > 0 and at most {MAX_PEER_TIMEOUT_S:,.0f} seconds, "
                f"got {self.peer_timeout_s}"
            )
        if self.on_nonfinite not in ("stop", "skip"):
            raise UserError(f"--on-nonfinite must be stop or skip, got {self.on_nonfinite!r}")
        if self.link.compress != "none" and self.consistency != "exact":
            raise UserError("--compress needs --consistency exact (sites sum exactly inside)")
        object.__setattr__(self, "options", tuple(self.options))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        raw = json.loads(text)
        raw["checkpoint"] = CheckpointConfig(**raw["checkpoint"])
        raw["emulation"] = EmulationConfig(**raw["emulation"])
        raw["batch"] = BatchConfig(**raw.get("batch", {}))
        raw["provider"] = ProviderConfig(**raw.get("provider", {}))
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
        metadata=option(
            "--workers",
            "device kinds, one per worker: e.g. v100,k80,k80 or 2xv100,k80",
            metavar="SPEC",
            required=True,
        )
    )
    events: str | None = field(
        default=None,
        metadata=option(
            "--events",
            "injected events, e.g. 'step 10: kill 1; step 20: add k80; step 35: notice 0 30s'",
            metavar="FILE|LIST",
        ),
    )
    verbose: bool = field(
        default=False,
        metadata=option(
            "--verbose", "show the traceback of an error raised in the job's code", short="-v"
        ),
    )
