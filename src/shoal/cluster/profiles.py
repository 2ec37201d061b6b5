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
"""

from __future__ import annotations

import bisect
import csv
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


@dataclass(frozen=True)
class AppProfile:
    name: str
    init_batch_size: int  # M0: the smallest profiled global batch
    max_batch_size: int  # the largest profiled global batch
    max_local_bsz: int  # the largest local batch measured on one GPU (memory bound)
    total_progress: float  # M0-iterations to finish training
    curves: dict[tuple[int, int], _Curve]  # (N, K) -> measured step times
    grad_progress: np.ndarray  # progress points of the M0 validation curve
    grad_sqr: np.ndarray
    grad_var: np.ndarray
    gpus_by_nodes: dict[int, list[int]]  # measured N -> sorted measured K's
    grad_progress_list: list[float]
    grad_sqr_list: list[float]
    grad_var_list: list[float]

    def step_time_s(self, num_nodes: int, num_gpus: float, local_bsz: float) -> float:
        """Seconds per step on `num_nodes` nodes and `num_gpus` (T4-equivalent) GPUs."""
        if num_gpus <= 0 or num_nodes <= 0 or local_bsz <= 0:
            raise ValueError("placement and local batch must be positive")
        nodes = sorted(self.gpus_by_nodes)
        i = bisect.bisect_left(nodes, num_nodes)
        n = nodes[min(i, len(nodes) - 1)]
        ks = self.gpus_by_nodes[n]
        k = min(max(num_gpus, ks[0]), ks[-1])
        j = bisect.bisect_left(ks, k)
        if ks[j] == k or j == 0:
            return self._at(n, ks[j], local_bsz)
        k0, k1 = ks[j - 1], ks[j]
        w = (k - k0) / (k1 - k0)
        return (1 - w) * self._at(n, k0, local_bsz) + w * self._at(n, k1, local_bsz)

    def _at(self, n: int, k: int, local_bsz: float) -> float:
        curve = self.curves[(n, k)]
        x = np.log(curve.local_bsz)
        lx = float(np.log(local_bsz))
        if len(x) == 1:
            return float(curve.step_time_s[0] * local_bsz / curve.local_bsz[0])
        if lx > x[-1]:  # beyond the largest measured batch: compute grows in proportion
            return float(curve.step_time_s[-1] * local_bsz / curve.local_bsz[-1])
        return float(np.interp(lx, x, curve.step_time_s))

    def grad_stats(self, progress: float) -> tuple[float, float]:
        """(|g|^2, sigma^2) at `progress`, interpolated on the M0 validation curve."""
        xs = self.grad_progress_list
        i = bisect.bisect_right(xs, progress)
        if i == 0:
            return self.grad_sqr_list[0], self.grad_var_list[0]
        if i == len(xs):
            return self.grad_sqr_list[-1], self.grad_var_list[-1]
        # linear interpolation (pure Python: np.interp on scalars dominates large runs)
        w = (progress - xs[i - 1]) / (xs[i] - xs[i - 1])
        sqr = self.grad_sqr_list[i - 1] + w * (self.grad_sqr_list[i] - self.grad_sqr_list[i - 1])
        var = self.grad_var_list[i - 1] + w * (self.grad_var_list[i] - self.grad_var_list[i - 1])
        return sqr, var


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

    def add(n: int, k: int, b: float, t: float) -> None:
        samples.setdefault((n, k), {}).setdefault(b, []).append(t)

    for row in _read_csv(app, "placements.csv"):
        digits = row["placement"]
        add(
            len(digits),
            sum(int(c) for c in digits),
            float(row["local_bsz"]),
            float(row["step_time"]),
        )
    for row in _read_csv(app, "scalability.csv"):
        n, k = int(row["num_nodes"]), int(row["num_replicas"])
        add(n, k, float(row["local_bsz"]), float(row["step_time"]))
    curves = {}
    for key, by_b in samples.items():
        bs = sorted(by_b)
        # several placements share (N, K): average them (they differ by GPUs per node)
        curves[key] = _Curve(np.array(bs), np.array([float(np.mean(by_b[b])) for b in bs]))

    root = resources.files("shoal.data").joinpath("pollux", "traces", app)
    batches = sorted(
        int(p.name[len("validation-") : -4])
        for p in root.iterdir()
        if p.name.startswith("validation-")
    )
    m0 = batches[0]
    rows = _read_csv(app, f"validation-{m0}.csv")
    progress = np.array([float(r["progress"]) for r in rows])
    single = curves[(1, 1)]
    return AppProfile(
        name=app,
        init_batch_size=m0,
        max_batch_size=batches[-1],
        max_local_bsz=int(single.local_bsz[-1]),
        total_progress=float(progress[-1]),
        curves=curves,
        grad_progress=progress,
        grad_sqr=np.array([float(r["grad_sqr"]) for r in rows]),
        grad_var=np.array([float(r["grad_var"]) for r in rows]),
        gpus_by_nodes={n: sorted(k for (nn, k) in curves if nn == n) for (n, _) in curves},
        grad_progress_list=[float(r["progress"]) for r in rows],
        grad_sqr_list=[float(r["grad_sqr"]) for r in rows],
        grad_var_list=[float(r["grad_var"]) for r in rows],
    )
