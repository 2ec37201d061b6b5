"""The search over schedule knobs: Optuna proposes, subprocess trials measure.

This module owns the search space (micro-batch size x fraction of checkpointed layers x fusion
on/off), the objective (measured samples/s, subject to peak memory <= cap) and the bookkeeping of
every trial. Optuna does the proposing: exhaustive `GridSampler` when the budget covers the grid,
otherwise a seeded `TPESampler` that is told about the memory constraint. One piece of domain
knowledge prunes trials without running them: for a fixed fusion setting, memory grows with the
micro-batch size and shrinks with the checkpointed fraction, so a configuration that is at least
as large and checkpoints no more than one that already failed the cap is skipped.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.errors import UserError
from shoal.tune.runner import TrialOutcome, run_trial
from shoal.tune.trial import TrialSpec

MeasureFn = Callable[[TrialSpec, float], TrialOutcome]


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values of each knob."""

    micro_batch_sizes: tuple[int, ...] = (1, 2, 4, 8)
    ckpt_ratios: tuple[float, ...] = (0.0, 0.5, 1.0)
    fusion: tuple[bool, ...] = (False, True)

    def __post_init__(self) -> None:
        if not (self.micro_batch_sizes and self.ckpt_ratios and self.fusion):
            raise ValueError("every knob of the search space needs at least one value")
        if any(b < 1 for b in self.micro_batch_sizes):
            raise ValueError(f"micro-batch sizes must be >= 1, got {self.micro_batch_sizes}")
        if any(not 0.0 <= r <= 1.0 for r in self.ckpt_ratios):
            raise ValueError(f"checkpoint ratios must be in [0, 1], got {self.ckpt_ratios}")

    @property
    def size(self) -> int:
        return len(self.micro_batch_sizes) * len(self.ckpt_ratios) * len(self.fusion)


@dataclass
class TrialRecord:
    """One configuration the search looked at, measured or pruned."""

    number: int
    micro_batch_size: int
    ckpt_ratio: float
    fusion: bool
    status: str  # ok | over_cap | oom | timeout | error | pruned
    samples_per_s: float | None = None
    peak_memory_mb: float | None = None
    step_time_s: float | None = None
    cpu_time_s: float | None = None  # CPU seconds per step, summed over processes
    detail: str = ""

    @property
    def feasible(self) -> bool:
        return self.status == "ok"

    def knobs(self) -> tuple[int, float, bool]:
        return (self.micro_batch_size, self.ckpt_ratio, self.fusion)

    def score(self, objective: str) -> float:
        """The value to maximize: samples/s ("throughput") or samples per CPU second ("cpu")."""
        if not self.feasible:
            return 0.0
        if objective == "cpu":
            return self.micro_batch_size / self.cpu_time_s if self.cpu_time_s else 0.0
        return self.samples_per_s or 0.0


@dataclass
class TuneResult:
    """All trials in the order they were looked at, and the fastest feasible one."""

    memory_cap_mb: float
    objective: str = "throughput"
    trials: list[TrialRecord] = field(default_factory=list)

    @property
    def best(self) -> TrialRecord | None:
        ok = [t for t in self.trials if t.feasible]
        return max(ok, key=lambda t: t.score(self.objective)) if ok else None

    def to_json(self) -> str:
        best = self.best
        return json.dumps(
            {
                "memory_cap_mb": self.memory_cap_mb,
                "objective": self.objective,
                "best": dataclasses.asdict(best) if best else None,
                "trials": [dataclasses.asdict(t) for t in self.trials],
            },
            indent=2,
        )


def _dominated(knobs: tuple[int, float, bool], failed: list[tuple[int, float, bool]]) -> bool:
    bs, ratio, fusion = knobs
    return any(f == fusion and bs >= b and ratio <= r for b, r, f in failed)


def _check(base: TrialSpec, memory_cap_mb: float, n_trials: int, objective: str, seed: int) -> None:
    """Refuse what would fail every trial, so that it is bad input, not "nothing fits"."""
    if not memory_cap_mb > 0:  # `not >` also refuses NaN
        raise ValueError(f"memory cap must be > 0 MiB, got {memory_cap_mb}")
    if n_trials < 1:
        raise ValueError(f"number of trials must be >= 1, got {n_trials}")
    if objective not in ("throughput", "cpu"):
        raise ValueError(f"objective must be 'throughput' or 'cpu', got {objective!r}")
    if not 0 <= seed < 2**32:  # the range of the sampler's (numpy's) seed
        raise ValueError(f"seed must be in [0, 2**32 - 1], got {seed}")
    import torch

    from shoal.models import get_model_entry
    from shoal.schedule.model_schedule import check_config

    if base.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: CUDA is not available")
    entry = get_model_entry(base.model)
    cfg = entry.make_config(**base.model_config)
    try:  # the model's schedule may refuse the config (a trial applies it to most points)
        check_config(base.model, cfg, base.world_size)
    except ValueError as exc:
        raise UserError(f"--model {base.model} --world-size {base.world_size}: {exc}") from None
    key = entry.seq_len_field  # a longer seq_len would fail inside the model, in every trial
    if key is not None:
        limit = getattr(cfg, key)
        if base.seq_len > limit:
            raise UserError(
                f"--seq-len {base.seq_len} is above {base.model}'s {key} of {limit}: give "
                f"--config {key}={base.seq_len} or a shorter --seq-len"
            )


def _sampler(grid: dict[str, list[Any]], space: SearchSpace, n_trials: int, seed: int) -> Any:
    import optuna

    if n_trials >= space.size:
        return optuna.samplers.GridSampler(grid, seed=seed)
    return optuna.samplers.TPESampler(seed=seed)  # reads the trials' set_constraint


def _measured(number: int, knobs: tuple[int, float, bool], out: TrialOutcome) -> TrialRecord:
    return TrialRecord(
        number,
        *knobs,
        status=out.status,
        samples_per_s=out.samples_per_s,
        peak_memory_mb=out.peak_memory_mb,
        step_time_s=out.step_time_s,
        cpu_time_s=out.cpu_time_s,
        detail=out.detail,
    )


@dataclass
class _Search:
    """The state of one search: what was looked at, and which points failed the cap."""

    base: TrialSpec
    grid: dict[str, list[Any]]
    run: MeasureFn
    result: TuneResult
    on_trial: Callable[[TrialRecord], None] | None
    seen: dict[tuple[int, float, bool], TrialRecord] = field(default_factory=dict)
    failed: list[tuple[int, float, bool]] = field(default_factory=list)

    def record(self, knobs: tuple[int, float, bool]) -> TrialRecord:
        if knobs in self.seen:  # TPE may propose a point twice; reuse the measurement
            return self.seen[knobs]
        if _dominated(knobs, self.failed):
            rec = TrialRecord(len(self.result.trials), *knobs, status="pruned", detail="dominated")
        else:
            spec = dataclasses.replace(
                self.base, micro_batch_size=knobs[0], ckpt_ratio=knobs[1], fusion=knobs[2]
            )
            rec = _measured(
                len(self.result.trials), knobs, self.run(spec, self.result.memory_cap_mb)
            )
            if rec.status in ("over_cap", "oom"):
                self.failed.append(knobs)
        self.seen[knobs] = rec
        self.result.trials.append(rec)
        if self.on_trial is not None:
            self.on_trial(rec)
        return rec

    def __call__(self, trial: Any) -> float:
        """Optuna's objective: look at the proposed point, report its score and constraint."""
        knobs = (
            trial.suggest_categorical("micro_batch_size", self.grid["micro_batch_size"]),
            trial.suggest_categorical("ckpt_ratio", self.grid["ckpt_ratio"]),
            trial.suggest_categorical("fusion", self.grid["fusion"]),
        )
        rec = self.record(knobs)
        cap = self.result.memory_cap_mb
        # Optuna's convention: a constraint value <= 0 is satisfied.
        excess = (rec.peak_memory_mb - cap) if rec.peak_memory_mb is not None else 1.0
        trial.set_constraint("peak_over_cap_mb", excess if rec.feasible else max(excess, 1.0))
        return rec.score(self.result.objective)


def tune(
    base: TrialSpec,
    space: SearchSpace,
    memory_cap_mb: float,
    n_trials: int,
    *,
    seed: int = 0,
    objective: str = "throughput",
    measure: MeasureFn | None = None,
    on_trial: Callable[[TrialRecord], None] | None = None,
) -> TuneResult:
    """Search `space` around `base` for the highest samples/s with peak memory <= cap.

    `n_trials` is the number of distinct configurations to look at (measured or pruned).
    `objective="cpu"` maximizes samples per CPU second instead of samples per wall second: the
    steadier choice when other jobs share the machine (it ignores parallel speedup, though).
    `measure(spec, cap)` runs one trial (default: `run_trial` in a subprocess); `on_trial` is
    called after every new configuration, e.g. to print progress. Bad arguments, a `seq_len`
    above the language model's limit among them, raise ValueError before any trial.
    """
    import optuna

    _check(base, memory_cap_mb, n_trials, objective, seed)
    grid = {
        "micro_batch_size": list(space.micro_batch_sizes),
        "ckpt_ratio": list(space.ckpt_ratios),
        "fusion": list(space.fusion),
    }
    run = measure or (lambda spec, cap: run_trial(spec, memory_cap_mb=cap))
    result = TuneResult(memory_cap_mb, objective)
    search = _Search(base, grid, run, result, on_trial)
    study = optuna.create_study(direction="maximize", sampler=_sampler(grid, space, n_trials, seed))
    # The budget counts distinct configurations: TPE may propose a point again, which costs no
    # measurement, so keep asking (up to a bound) until the budget or the grid is used up.
    wanted = min(n_trials, space.size)

    def stop_when_done(study: Any, _trial: Any) -> None:
        if len(result.trials) >= wanted:
            study.stop()

    study.optimize(search, n_trials=10 * wanted, callbacks=[stop_when_done])
    return result
