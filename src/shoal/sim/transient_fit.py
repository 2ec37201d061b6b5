"""Held-out tests of the parameter-server model: fit on some measured clusters, predict others.

Two splits of the paper's measurements (`shoal.sim.transient_data`):
- `size`: fit on the clusters of 1, 2 and 4 workers; predict every 8-worker cluster (K80 and
  V100, 1 and 2 parameter servers, on-demand and spot). The paper's 8-K80 spot cluster, whose
  runs include revocations, is predicted by replaying it with measured lifetimes.
- `kind`: fit on every K80 and V100 cluster; predict the P100 ones. P100's compute time is not
  fitted: the device table places it between K80 and V100 (`PSModel.with_kind_from_devices`).
Clusters of 3, 5, 6 and 7 workers are in neither side of the size split.
Each prediction stands beside the measured mean and sample sd over the runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from shoal.sim.transient import ClusterConfig, replicate_cluster
from shoal.sim.transient_data import Measurement, load_measurements, spot_runs
from shoal.sim.transient_model import PSModel, fit
from shoal.sim.transient_spec import parse_cluster

SPLITS = ("size", "kind")


@dataclass(frozen=True)
class Split:
    name: str
    fit_rows: tuple[Measurement, ...]
    held_out: tuple[Measurement, ...]
    unseen_kind: str | None = None  # a kind placed by the device table, not fitted

    def __post_init__(self) -> None:
        overlap = {m.name for m in self.fit_rows} & {m.name for m in self.held_out}
        if overlap:
            raise ValueError(f"split {self.name!r} fits on held-out rows {sorted(overlap)}")

    def model(self) -> PSModel:
        """The model fitted on `fit_rows` only."""
        model = fit(self.fit_rows)
        return model.with_kind_from_devices(self.unseen_kind) if self.unseen_kind else model


def make_split(name: str, rows: tuple[Measurement, ...] | None = None) -> Split:
    rows = load_measurements() if rows is None else rows
    rules: dict[str, tuple[Callable[[Measurement], bool], Callable[[Measurement], bool]]] = {
        "size": (lambda m: m.num_workers in (1, 2, 4), lambda m: m.num_workers == 8),
        "kind": (lambda m: m.kind in ("k80", "v100"), lambda m: m.kind == "p100"),
    }
    if name not in rules:
        raise ValueError(f"unknown split {name!r} (known: {', '.join(SPLITS)})")
    in_fit, held = rules[name]
    return Split(
        name,
        tuple(m for m in rows if in_fit(m)),
        tuple(m for m in rows if held(m)),
        unseen_kind="p100" if name == "kind" else None,
    )


@dataclass(frozen=True)
class Prediction:
    name: str
    kind: str
    num_workers: int
    num_ps: int
    tier: str
    runs: int
    measured_mean_s: float
    measured_sd_s: float
    predicted_s: float

    @property
    def z(self) -> float | None:
        """(predicted - measured mean) / measured sd; None for a single measured run."""
        if self.runs < 2:
            return None
        return (self.predicted_s - self.measured_mean_s) / self.measured_sd_s

    @property
    def within_one_sd(self) -> bool | None:
        return None if self.z is None else abs(self.z) <= 1.0


def predict(split: Split, spot_replays: int = 400, seed: int = 0) -> list[Prediction]:
    """The held-out rows, predicted by the model fitted on the split's fit rows alone."""
    model = split.model()
    out = [
        Prediction(
            m.name,
            m.kind,
            m.num_workers,
            m.num_ps,
            m.tier,
            len(m.durations_s),
            m.mean_s,
            m.sd_s,
            model.duration_s(m),
        )
        for m in split.held_out
    ]
    if split.name == "size":
        out.append(spot_with_revocations(model, 8, spot_replays, seed))
    return out


def spot_with_revocations(model: PSModel, size: int, runs: int, seed: int) -> Prediction:
    """The paper's `size`-K80 spot cluster, every completed run, against a seeded replay."""
    measured = spot_runs(size)
    cluster = parse_cluster(f"{size}xk80@us-east1:spot")
    summary = replicate_cluster(ClusterConfig(cluster, model), runs, seed)
    return Prediction(
        f"{size}-spot (revocations)",
        "k80",
        size,
        1,
        "spot",
        len(measured),
        statistics.mean(measured),
        statistics.stdev(measured),
        summary.mean_hours * 3600,
    )
