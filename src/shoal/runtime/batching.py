"""The live side of adaptive global batch sizes: the job's policy, fed each step's statistics.

The policy (`shoal.control.batch_policy`, pure) is built once per worker from the run's
`BatchConfig` and the job (`policy_for`; the launcher builds it too, so bad input fails before
any worker starts). After every step each worker hands it the step's exact statistics
(`StepStats`: per-micro-batch |g_j|^2, |g|^2 of the exact mean, the halves' similarity on the
steps it asks for) and a `BatchContext` whose throughput model comes from the priors of a fixed
reference placement, never from measured speeds or the current group: every input is the same
bits on every layout, so every worker decides the same next batch at the same step with no
extra message. The decision's state (the policy's, and the noise scale logged in the metrics)
is part of the training state.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shoal.config import BatchConfig
from shoal.control.batch_policy import THROUGHPUT_POLICIES, make_policy
from shoal.control.batch_policy_base import (
    BatchContext,
    BatchPolicy,
    needs_similarity,
    parse_bounds,
)
from shoal.control.gradstats import NoiseScale, StepStats
from shoal.errors import UserError
from shoal.job import Job, parse_options
from shoal.perf.devices import load_devices

_NAMED = ("bounds", "every", "lr_scaling")  # Job.batch_options keys that are make_policy's own
_THROUGHPUT_KNOBS = ("--batch-reference", "--batch-sync")  # read by THROUGHPUT_POLICIES only


def policy_name(config: BatchConfig, job: Job) -> str:
    """The run's policy: --batch-policy, else the job's `batch_policy`, else fixed."""
    return config.policy or job.batch_policy or "fixed"


def policy_source(config: BatchConfig, job: Job) -> str:
    """Where the run's policy comes from, for a message: `{source} {name}`."""
    if config.policy:
        return "--batch-policy"
    return "the job's batch_policy" if job.batch_policy else "the default policy"


def policy_for(config: BatchConfig, job: Job, consistency: str = "exact") -> BatchPolicy:
    """The run's batch policy: the --batch-* flags over the job's `batch_policy` and
    `batch_options`. UserError (one line) on bad input."""
    params = dict(job.batch_options)
    named = {k: params.pop(k) for k in _NAMED if k in params}
    params.update(parse_options(list(config.options), "--batch-option"))
    name = policy_name(config, job)
    policy = make_policy(
        name,
        micro_batch_size=job.micro_batch_size,
        bounds=given_bounds(config, job),
        every=config.every or named.get("every", 100),
        lr_scaling=config.lr_scaling or named.get("lr_scaling", "none"),
        **params,
    )
    if name != "fixed" and consistency != "exact":
        # its statistics are per micro-batch; fast mode's autograd sums them before anyone sees one
        raise UserError(f"--batch-policy {name} needs --consistency exact")
    bounds = given_bounds(config, job)
    if name != "fixed" and bounds and not bounds[0] <= job.global_batch_size <= bounds[1]:
        # the first steps run at the job's batch, before any decision: it must be in bounds
        source = "--batch-bounds" if config.bounds else "the job's batch_options bounds"
        raise UserError(
            f"the job's global_batch_size {job.global_batch_size} is outside {source} "
            f"{bounds[0]}:{bounds[1]}: its first steps would run outside them"
        )
    return policy


def check_batch(config: BatchConfig, job: Job, consistency: str, warn: bool = True) -> None:
    """What a worker would trip on, for the launcher to refuse before any worker starts (a
    torchrun worker checks its own flags: no launcher saw them with the job). A knob given that
    the run's policy would not read is not ignored silently: with the fixed policy, which
    reads none, it is refused (the run is not the adaptive one asked for); --batch-reference
    and --batch-sync with an adaptive policy weighing no throughput (jabas, schedule) are
    warned about (`warn`), since one set of knobs may serve runs of several policies."""
    name, source = policy_name(config, job), policy_source(config, job)
    given = config.given_knobs()
    if name == "fixed" and given:
        verb = "needs" if len(given) == 1 else "need"
        raise UserError(f"{_listed(given)} {verb} an adaptive --batch-policy ({source} is fixed)")
    policy = policy_for(config, job, consistency)
    if policy.name == "fixed":
        return
    reference_priors(config.reference, job)  # unknown kinds
    unread = [flag for flag in given if flag in _THROUGHPUT_KNOBS]
    if unread and not policy.uses_throughput and warn:
        verb = "has" if len(unread) == 1 else "have"
        sys.stderr.write(
            f"shoal: warning: {_listed(unread)} {verb} no effect with {source} {name}: only "
            f"{_listed(THROUGHPUT_POLICIES)} weigh throughput\n"
        )


def _listed(words) -> str:
    """'a', 'a and b', 'a, b and c'."""
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def batch_settings(config: BatchConfig, job: Job, consistency: str = "exact") -> dict[str, Any]:
    """The batch settings that change what is trained, normalized (the job fingerprint's:
    `runtime/outputs.py`): none with the fixed policy, whose runs train the job's batch
    whatever the other --batch-* flags say; else the effective policy (the flag's or the
    job's) with its knobs, defaults included, the bounds it decides within, and for a policy
    weighing throughput (pollux, shoal) the reference placement's kinds and --batch-sync."""
    policy = policy_for(config, job, consistency)
    if policy.name == "fixed":
        return {}
    low, high = given_bounds(config, job) or default_bounds(job)
    settings = {**policy.settings(), "bounds": [int(low), int(high)]}
    if policy.uses_throughput:
        kinds = None  # one worker of unit speed
        if config.reference:
            devices = load_devices()
            kinds = [devices.check(k) for k in devices.parse_workers(config.reference)]
        settings.update(reference=kinds, sync=config.effective_sync)
    return settings


def given_bounds(config: BatchConfig, job: Job) -> tuple[int, int] | None:
    """--batch-bounds, else the job's `batch_options["bounds"]` ("LOW:HIGH" or a pair)."""
    bounds = config.bounds or job.batch_options.get("bounds")
    if isinstance(bounds, str):
        return parse_bounds(bounds)
    return tuple(bounds) if bounds else None


def default_bounds(job: Job) -> tuple[int, int]:
    """One micro-batch up to the larger of an epoch and the job's batch (multiples of b)."""
    b = job.micro_batch_size
    return b, max(len(job.dataset) // b * b, job.global_batch_size)


def reference_priors(reference: str | None, job: Job) -> list[float]:
    """Prior seconds per micro-batch of the reference placement's workers (relative units: the
    device table's speed for the job's workload); one worker of unit speed when none is named."""
    if not reference:
        return [1.0]
    devices = load_devices()
    kinds = devices.parse_workers(reference)
    return [1.0 / devices.workload_speed(devices.kind(k).name, job.workload) for k in kinds]


@dataclass(frozen=True)
class BatchRecord:
    """What a step's decision adds to its metrics line."""

    noise_scale: float | None = None
    similarity: float | None = None
    lr_factor: float | None = None


class AdaptiveBatch:
    """One worker's batch controller: measures when the policy needs it, decides after each
    step, and scales the learning rate for the step's batch."""

    def __init__(
        self,
        config: BatchConfig,
        job: Job,
        consistency: str,
        throughput_model: Callable[[int, list[float], float], Callable[[int], float]],
    ):
        self.policy = policy_for(config, job, consistency)
        self.job = job
        self.measuring = self.policy.name != "fixed"
        self.noise = NoiseScale()  # for the metrics, whatever the policy estimates itself
        self.bounds = given_bounds(config, job) or default_bounds(job)
        self.throughput = None  # a fixed batch needs no model (nor the device table)
        if self.measuring:
            priors = reference_priors(config.reference, job)
            # the per-step exchange in the same prior units: --batch-sync fastest micro-batches
            sync = config.effective_sync * min(priors)
            self.throughput = throughput_model(job.micro_batch_size, priors, sync)

    def context(self, cap_micro_batches: int | None) -> BatchContext:
        return BatchContext(
            micro_batch_size=self.job.micro_batch_size,
            bounds=self.bounds,
            cap_micro_batches=cap_micro_batches,
            throughput=self.throughput,
            initial_batch=self.job.global_batch_size,
        )

    def wants_similarity(self, step: int) -> bool:
        return self.measuring and needs_similarity(self.policy, step)

    def lr_factor(self, batch: int, cap_micro_batches: int | None) -> float:
        if not self.measuring:
            return 1.0  # fixed: the user's learning rate, untouched
        return float(self.policy.lr_factor(batch, self.context(cap_micro_batches)))

    def decide(self, stats: StepStats, cap_micro_batches: int | None) -> int:
        """The next step's global batch in samples."""
        self.noise.update(stats)
        return int(self.policy.decide(stats, self.context(cap_micro_batches)))

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "noise": self.noise.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.noise.load_state_dict(state["noise"])
