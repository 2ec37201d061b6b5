"""Measured application profiles: step time per placement and batch size, gradient statistics.

Each application of Pollux's artifact (`data/pollux/traces/<app>/`) ships:
- `placements.csv` and `scalability.csv`: the measured step time of one synchronous data-parallel
  step on NVIDIA T4 nodes, per placement (number of nodes N, number of GPUs K) and local batch b;
- `validation-<M>.csv`: training curves at global batch M, with the gradient's squared norm and
  variance per epoch, which give the statistical efficiency of a larger batch.

`AppProfile.step_time_s(N, K, b)` interpolates the measured step times: linearly in log(b) within a
measured (N, K); linearly in K between measured K's at the same N; an unmeasured N uses the
smallest measured N above it (more nodes never makes synchronisation cheaper). Progress is counted
as Pollux does, in iterations at the initial batch size M0 ("scale-invariant iterations"); a job is
done when it reaches the progress of the last row of `validation-<M0>.csv`.

`AppProfile.grad_stats(progress, M)` reads the gradient statistics off the curve measured at batch M
(between measured batches: linear in log M; outside them: the nearest curve), as Pollux's simulator
does. The curves differ: a large batch trains on a different trajectory, and its own statistics
reproduce the number of steps it really took (cifar10 at 4096: 2,146 modelled vs 2,011 measured
steps; the M0 curve's statistics would give 3,460).
"""

from __future__ import annotations

import bisect
import csv
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from shoal.errors import UserError

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
# The kind Pollux measured every profile on.
PROFILE_KIND = "t4"


@dataclass(frozen=True)
class _Curve:
    local_bsz: np.ndarray  # sorted ascending
    step_time_s: np.ndarray
    sync_time_s: np.ndarray  # the part of a step spent synchronising gradients


@dataclass(frozen=True)
class _GradCurve:
    progress: list[float]  # pure-Python lists: np.interp on scalars dominates large runs
    sqr: list[float]
    var: list[float]

    def at(self, progress: float) -> tuple[float, float]:
        xs = self.progress
        i = bisect.bisect_right(xs, progress)
        if i == 0:
            return self.sqr[0], self.var[0]
        if i == len(xs):
            return self.sqr[-1], self.var[-1]
        w = (progress - xs[i - 1]) / (xs[i] - xs[i - 1])
        sqr = self.sqr[i - 1] + w * (self.sqr[i] - self.sqr[i - 1])
        var = self.var[i - 1] + w * (self.var[i] - self.var[i - 1])
        return sqr, var


@dataclass(frozen=True)
class AppProfile:
    name: str
    init_batch_size: int  # M0: the smallest profiled global batch
    max_batch_size: int  # the largest profiled global batch
    max_local_bsz: int  # the largest local batch measured on one GPU (memory bound)
    total_progress: float  # M0-iterations to finish training
    curves: dict[tuple[int, int], _Curve]  # (N, K) -> measured step times
    gpus_by_nodes: dict[int, list[int]]  # measured N -> sorted measured K's
    grad_batches: list[float]  # measured global batches, ascending (the first is M0)
    grad_log_batches: list[float]
    grad_curves: list[_GradCurve]  # one per measured batch

    @property
    def grad_progress(self) -> list[float]:
        """Progress points (epoch ends) of the M0 validation curve."""
        return self.grad_curves[0].progress

    def step_time_s(
        self, num_nodes: int, num_gpus: float, local_bsz: float, accum: int = 1
    ) -> float:
        """Seconds per step on `num_nodes` nodes and `num_gpus` (T4-equivalent) GPUs.

        With `accum` > 1 the step runs `accum` micro-steps of `local_bsz` and synchronises once,
        after the last (as Pollux's simulator and DDP's no_sync do).
        """
        if num_gpus <= 0 or num_nodes <= 0 or local_bsz <= 0 or accum < 1:
            raise ValueError("placement, local batch and accumulation must be positive")
        nodes = sorted(self.gpus_by_nodes)
        i = bisect.bisect_left(nodes, num_nodes)
        n = nodes[min(i, len(nodes) - 1)]
        ks = self.gpus_by_nodes[n]
        k = min(max(num_gpus, ks[0]), ks[-1])
        j = bisect.bisect_left(ks, k)
        if ks[j] == k or j == 0:
            step, sync = self._at(n, ks[j], local_bsz)
        else:
            k0, k1 = ks[j - 1], ks[j]
            w = (k - k0) / (k1 - k0)
            step0, sync0 = self._at(n, k0, local_bsz)
            step1, sync1 = self._at(n, k1, local_bsz)
            step, sync = (1 - w) * step0 + w * step1, (1 - w) * sync0 + w * sync1
        return step + (accum - 1) * (step - sync)

    def _at(self, n: int, k: int, local_bsz: float) -> tuple[float, float]:
        """(step, sync) seconds at a measured (N, K)."""
        curve = self.curves[(n, k)]
        x = np.log(curve.local_bsz)
        lx = float(np.log(local_bsz))
        if len(x) == 1 or lx > x[-1]:  # beyond the largest measured batch: compute grows
            ratio = local_bsz / curve.local_bsz[-1]
            step, sync = float(curve.step_time_s[-1]), float(curve.sync_time_s[-1])
            return sync + (step - sync) * ratio, sync
        step = float(np.interp(lx, x, curve.step_time_s))
        return step, min(step, float(np.interp(lx, x, curve.sync_time_s)))

    def grad_stats(self, progress: float, batch_size: float | None = None) -> tuple[float, float]:
        """(|g|^2, sigma^2) at `progress` when training at `batch_size` (default M0)."""
        curves = self.grad_curves
        if batch_size is None or batch_size <= self.grad_batches[0]:
            return curves[0].at(progress)
        if batch_size >= self.grad_batches[-1]:
            return curves[-1].at(progress)
        logs = self.grad_log_batches
        lb = math.log(batch_size)
        i = bisect.bisect_right(logs, lb)
        w = (lb - logs[i - 1]) / (logs[i] - logs[i - 1])
        s0, v0 = curves[i - 1].at(progress)
        s1, v1 = curves[i].at(progress)
        return s0 + w * (s1 - s0), v0 + w * (v1 - v0)


def _read_csv(app: str, name: str) -> list[dict[str, str]]:
    path = resources.files("shoal.data").joinpath("pollux", "traces", app, name)
    with path.open() as fh:
        return list(csv.DictReader(fh))


@cache
def load_profile(app: str) -> AppProfile:
    """The measured profile of a Pollux application (cached; profiles are immutable)."""
    if app not in APPS:
        raise UserError(f"unknown application {app!r} (known: {', '.join(APPS)})")
    samples: dict[tuple[int, int], dict[float, list[float]]] = {}

    def add(n: int, k: int, b: float, step: float, sync: float) -> None:
        samples.setdefault((n, k), {}).setdefault(b, []).append((step, sync))

    for row in _read_csv(app, "placements.csv"):
        digits = row["placement"]
        add(
            len(digits),
            sum(int(c) for c in digits),
            float(row["local_bsz"]),
            float(row["step_time"]),
            float(row["sync_time"]),
        )
    for row in _read_csv(app, "scalability.csv"):
        n, k = int(row["num_nodes"]), int(row["num_replicas"])
        add(n, k, float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"]))
    curves = {}
    for key, by_b in samples.items():
        bs = sorted(by_b)
        # several placements share (N, K): average them (they differ by GPUs per node)
        mean = [np.mean(by_b[b], axis=0) for b in bs]
        curves[key] = _Curve(
            np.array(bs), np.array([m[0] for m in mean]), np.array([m[1] for m in mean])
        )

    root = resources.files("shoal.data").joinpath("pollux", "traces", app)
    batches = sorted(
        int(p.name[len("validation-") : -4])
        for p in root.iterdir()
        if p.name.startswith("validation-")
    )
    grad_curves = []
    for batch in batches:
        rows = _read_csv(app, f"validation-{batch}.csv")
        grad_curves.append(
            _GradCurve(
                [float(r["progress"]) for r in rows],
                [float(r["grad_sqr"]) for r in rows],
                [float(r["grad_var"]) for r in rows],
            )
        )
    single = curves[(1, 1)]
    return AppProfile(
        name=app,
        init_batch_size=batches[0],
        max_batch_size=batches[-1],
        max_local_bsz=int(single.local_bsz[-1]),
        total_progress=grad_curves[0].progress[-1],
        curves=curves,
        gpus_by_nodes={n: sorted(k for (nn, k) in curves if nn == n) for (n, _) in curves},
        grad_batches=[float(b) for b in batches],
        grad_log_batches=[math.log(b) for b in batches],
        grad_curves=grad_curves,
    )
