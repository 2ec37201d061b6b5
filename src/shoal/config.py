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
import math
import os
import re
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

    keep: int = field(
        default=3,
        metadata=_flag(
            "--checkpoint-keep",
            "durable checkpoints kept, newest first (0: all of them)",
            metavar="K",
        ),
    )

    def __post_init__(self) -> None:
        _at_least(self.every, 0, "--checkpoint-every")
        _at_least(self.seconds, 0, "--checkpoint-seconds")
        _at_least(self.keep, 0, "--checkpoint-keep")


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
    sync: float = field(
        default=0.0,
        metadata=_flag(
            "--batch-sync",
            "per-step gradient synchronisation in the policy's throughput model, in micro-batch "
            "times of the reference's fastest kind (default 0; e.g. 1.4: a step's exchange "
            "takes 1.4 micro-batches' compute)",
            metavar="MICRO_BATCHES",
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
        _at_least(self.sync, 0, "--batch-sync")
        object.__setattr__(self, "options", tuple(self.options))


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h)?")
_UNITS = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
TIER_NAMES = ("on_demand", "spot")


def parse_duration(text: str, flag: str) -> float:
    """`45m`, `2h`, `900s` or `900` (seconds) -> seconds; one line naming the flag otherwise."""
    m = _DURATION.fullmatch(text.strip().lower())
    if not m or not float(m[1]) > 0:
        raise UserError(f"{flag}: expected a duration such as 45m, 2h or 900s, got {text!r}")
    return float(m[1]) * _UNITS[m[2]]


def parse_usd(text: str, flag: str) -> float:
    """`2.50usd`, `$2.5` or `2.5` -> 2.5."""
    raw = text.strip().lower().removeprefix("$").removesuffix("usd").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise UserError(f"{flag}: expected an amount such as 2.50usd, got {text!r}")
    return value


def _kind_tier(text: str, flag: str) -> tuple[str, str]:
    kind, _, tier = text.strip().lower().partition(":")
    tier = tier.replace("-", "_") or "on_demand"
    if not kind or tier not in TIER_NAMES:
        raise UserError(f"{flag}: expected KIND:TIER (tier on_demand or spot), got {text!r}")
    return kind, tier


@dataclass(frozen=True)
class ProviderConfig:
    """Servers bought from a provider (issue 14): the emulated local one, its spot revocations,
    the autoscaler's goal. All times are emulated seconds (`time_scale` of them per wall second),
    prices USD per emulated hour. Without `--provider` none of this is used."""

    name: str | None = field(
        default=None,
        metadata=_flag(
            "--provider",
            "buy the workers from a provider: local (emulated, with spot revocations)",
            choices=("local",),
        ),
    )
    autoscale: bool = field(
        default=False,
        metadata=_flag("--autoscale", "let the scaler choose the mix of servers (needs a goal)"),
    )
    deadline: str | None = field(
        default=None,
        metadata=_flag(
            "--deadline", "autoscale: the cheapest mix finishing by then", metavar="DURATION"
        ),
    )
    budget: str | None = field(
        default=None,
        metadata=_flag(
            "--budget", "autoscale: the fastest mix spending at most this", metavar="AMOUNT"
        ),
    )
    spot_lifetimes: str | None = field(
        default=None,
        metadata=_flag(
            "--spot-lifetimes",
            "spot lifetime models per kind, e.g. k80:gce,v100:p3 (default gce)",
            metavar="SPEC",
        ),
    )
    spot_trace: str | None = field(
        default=None,
        metadata=_flag(
            "--spot-trace", "spot lifetimes from a trace file (Bamboo or kind,lifetime_s)",
            metavar="FILE",
        ),
    )  # fmt: skip
    kinds: str | None = field(
        default=None,
        metadata=_flag(
            "--kinds", "kinds the scaler may buy (default: those of --workers)", metavar="KINDS"
        ),
    )
    time_scale: float = field(
        default=1.0,
        metadata=_flag("--time-scale", "emulated seconds per wall second (default 1)", metavar="X"),
    )
    max_servers: int = field(
        default=8, metadata=_flag("--max-servers", "at most N servers at once", metavar="N")
    )
    scale_every_s: float = field(
        default=600.0,
        metadata=_flag(
            "--scale-every", "re-decide the mix every S emulated seconds", metavar="SECONDS"
        ),
    )
    startup_s: float = field(
        default=60.0,
        metadata=_flag(
            "--startup", "emulated seconds from a request to a ready server", metavar="SECONDS"
        ),
    )
    notice: str = field(
        default="30",
        metadata=_flag(
            "--notice",
            "emulated seconds of warning before a spot revocation, or none",
            metavar="SECONDS|none",
        ),
    )
    quota: tuple[str, ...] = field(
        default=(),
        metadata=_flag(
            "--quota", "at most N servers of a kind and tier (repeatable)", metavar="KIND:TIER=N"
        ),
    )
    outages: tuple[str, ...] = field(
        default=(),
        metadata=_flag(
            "--outage",
            "no capacity of a kind and tier from A to B emulated seconds (repeatable)",
            metavar="KIND:TIER:A-B",
        ),
    )
    seed: int = field(
        default=0,
        metadata=_flag("--provider-seed", "seed of the revocations (default 0)", metavar="N"),
    )
    recovery: str = field(
        default="peers",
        metadata=_flag(
            "--recovery",
            "after a revocation: peers (the survivors go on, shoal's own) or restart (every "
            "worker stops and the job restarts on fresh servers from the last durable "
            "checkpoint, as SkyPilot's managed spot does)",
            choices=("peers", "restart"),
        ),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "quota", tuple(self.quota))
        object.__setattr__(self, "outages", tuple(self.outages))
        if self.name is None:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            if any(getattr(self, k) != v for k, v in defaults.items()):
                raise UserError("--autoscale and the provider flags need --provider local")
            return
        if self.name != "local":
            raise UserError(f"--provider: unknown provider {self.name!r} (known: local)")
        if self.deadline is not None and self.budget is not None:
            raise UserError("--deadline and --budget: give one goal, not both")
        goal = self.deadline_s is not None or self.budget_usd is not None
        if self.autoscale and not goal:
            raise UserError("--autoscale needs a goal: --deadline DURATION or --budget AMOUNT")
        if goal and not self.autoscale:
            raise UserError("--deadline and --budget are the scaler's goal: add --autoscale")
        if not self.time_scale > 0 or math.isinf(self.time_scale):
            raise UserError(f"--time-scale must be > 0, got {self.time_scale}")
        if self.recovery not in ("peers", "restart"):
            raise UserError(f"--recovery must be peers or restart, got {self.recovery!r}")
        if self.recovery == "restart" and self.autoscale:
            raise UserError("--recovery restart holds the --workers mix: drop --autoscale")
        _at_least(self.max_servers, 1, "--max-servers")
        _at_least(self.startup_s, 0, "--startup")
        if not self.scale_every_s > 0:
            raise UserError(f"--scale-every must be > 0 seconds, got {self.scale_every_s}")
        self.notice_s, self.quota_map, self.outage_list  # noqa: B018 (each checks its flag)

    @property
    def deadline_s(self) -> float | None:
        return None if self.deadline is None else parse_duration(self.deadline, "--deadline")

    @property
    def budget_usd(self) -> float | None:
        return None if self.budget is None else parse_usd(self.budget, "--budget")

    @property
    def notice_s(self) -> float | None:
        if self.notice.strip().lower() == "none":
            return None
        try:
            value = float(self.notice)
        except ValueError:
            value = math.nan
        if not value >= 0:
            raise UserError(f"--notice: expected seconds or none, got {self.notice!r}")
        return value

    @property
    def kind_list(self) -> tuple[str, ...]:
        return tuple(k.strip().lower() for k in (self.kinds or "").split(",") if k.strip())

    @property
    def quota_map(self) -> dict[tuple[str, str], int]:
        out = {}
        for item in self.quota:
            key, _, n = item.partition("=")
            if not n.strip().isdigit():
                raise UserError(f"--quota: expected KIND:TIER=N, got {item!r}")
            out[_kind_tier(key, "--quota")] = int(n)
        return out

    @property
    def outage_list(self) -> tuple[tuple[str, str, float, float], ...]:
        out = []
        for item in self.outages:
            key, _, span = item.rpartition(":")
            a, _, b = span.partition("-")
            try:
                lo, hi = float(a), float(b)
            except ValueError:
                raise UserError(f"--outage: expected KIND:TIER:A-B, got {item!r}") from None
            out.append((*_kind_tier(key, "--outage"), lo, hi))
        return tuple(out)


@dataclass(frozen=True)
class SlowLinkConfig:
    """Training across slow links (issue 15): which workers share a site, and how the sites'
    sums cross the links between them. Inside a site the exact dense sum runs as always;
    across sites either each site's leader sends a sparse message with error feedback every
    step (`--compress`, `runtime/sites.py`), or every site takes H optimizer steps on its own
    sum and then one outer Nesterov step on the sites' averaged pseudo-gradient (`--local-steps
    H`, DiLoCo, `runtime/local_update.py`). Neither set (the default): nothing changes."""

    sites: str | None = field(
        default=None,
        metadata=_flag(
            "--sites",
            "worker indices per site, e.g. 0,1/2,3 (default: one site; under torchrun one "
            "site per node); a worker the spec does not name joins site (index mod sites)",
            metavar="SPEC",
        ),
    )
    compress: str = field(
        default="none",
        metadata=_flag(
            "--compress",
            "across sites: none, topk:KEEP, blocktopk:KEEP (KEEP in (0, 1)), or auto (the "
            "bandwidth controller picks KEEP each step)",
            metavar="MODE",
        ),
    )
    sparse_optim: str = field(
        default="lazy",
        metadata=_flag(
            "--sparse-optim",
            "with --compress: lazy (only the entries the merged update touched change, their "
            "optimizer state too; SGD, Adam, AdamW) or dense (the job's optimizer as it is); "
            "default lazy",
            metavar="KIND",
        ),
    )
    pipeline: bool = field(
        default=False,
        metadata=_flag(
            "--pipeline",
            "with --compress topk/blocktopk: staleness 1, step t's exchange across sites runs "
            "under step t+1's compute and its update is applied at the end of step t+1",
        ),
    )

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
    outer_overlap: int | None = field(
        default=None,
        metadata=_flag(
            "--outer-overlap",
            "local-update mode: the outer exchange runs under the next D inner steps, "
            "1 <= D <= H (default: off, the sites wait for it)",
            metavar="D",
        ),
    )

    def __post_init__(self) -> None:
        # the grammar only (config imports nothing but errors); `control.bandwidth`'s
        # parse_compress / parse_sites give the worker its parsed values
        mode, _, keep = self.compress.partition(":")
        if mode in ("none", "auto") and not keep and not _:
            pass
        elif mode in ("topk", "blocktopk") and keep:
            try:
                ratio = float(keep)
            except ValueError:
                raise UserError(f"--compress {self.compress}: KEEP must be a number") from None
            if not 0.0 < ratio < 1.0:
                raise UserError(f"--compress keep ratio must be in (0, 1), got {keep}")
        else:
            raise UserError(
                f"--compress must be none, topk:KEEP, blocktopk:KEEP or auto, got {self.compress!r}"
            )
        if self.sparse_optim not in ("lazy", "dense"):
            raise UserError(f"--sparse-optim must be lazy or dense, got {self.sparse_optim!r}")
        if self.sites is not None:
            _check_sites(self.sites)
        # local-update mode: the same words as control.bandwidth.validate_slow_link
        h = self.local_steps
        if h is not None and (int(h) != h or h < 1):
            raise UserError(f"--local-steps: local steps H must be an integer >= 1, got {h}")
        if not self.outer_lr > 0:
            raise UserError(f"--outer-lr must be > 0, got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:
            raise UserError(f"--outer-momentum must be in [0, 1), got {self.outer_momentum}")
        if self.pipeline and not self.compress.startswith(("topk:", "blocktopk:")):
            raise UserError("--pipeline needs --compress topk:KEEP or blocktopk:KEEP")
        d = self.outer_overlap
        if d is not None and (h is None or int(d) != d or not 1 <= d <= h):
            raise UserError(f"--outer-overlap D needs --local-steps H and 1 <= D <= H, got {d}")
        if h is not None and self.compress != "none":
            raise UserError("--local-steps and --compress: choose one way across the links")


def _check_sites(spec: str) -> None:
    """A site spec names workers 0..n-1, each in exactly one site, every site non-empty."""
    seen: list[int] = []
    for i, part in enumerate(spec.split("/")):
        names = [w.strip() for w in part.split(",") if w.strip()]
        if not names:
            raise UserError(f"--sites: site {i} of {spec!r} names no worker")
        try:
            seen += [int(w) for w in names]
        except ValueError:
            raise UserError(f"--sites {spec!r}: workers are indices, got {part!r}") from None
    if sorted(seen) != list(range(len(seen))):
        raise UserError(f"--sites {spec!r} must name workers 0..{len(seen) - 1}, each once")


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
    provider: ProviderConfig = field(default_factory=ProviderConfig)
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
