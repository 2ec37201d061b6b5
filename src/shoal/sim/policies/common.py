"""Placement helpers shared by several policies (gang placement, kind preference)."""

from __future__ import annotations

from shoal.perf.devices import load_devices
from shoal.perf.goodput import goodput_model
from shoal.sim.jobs import JobRun
from shoal.sim.policy import ClusterView, Decision


def kinds_by_speed(view: ClusterView, app: str) -> list[str]:
    """The cluster's kinds, fastest first for `app` (memoised on the view)."""
    key = ("by_speed", app)
    if key not in view._memo:
        table = load_devices()
        view._memo[key] = sorted(view.kinds(), key=lambda k: (-table.app_speed(k, app), k))
    return view._memo[key]


def place_gang(
    view: ClusterView, job: JobRun, tiers: tuple[str | None, ...] = (None,)
) -> Decision | None:
    """Requested GPUs of one kind (preferred, else fastest that fits); None if none fits.

    A gang larger than any single kind's capacity may span kinds. A gang gives every GPU one
    equal share (parallelism = its GPU count), so it runs at its slowest GPU's pace, as
    DistributedDataParallel does.
    """
    n = job.spec.requested_gpus
    kinds = [job.spec.preferred_kind] if job.spec.preferred_kind else None
    for kind in kinds or kinds_by_speed(view, job.spec.app):
        for tier in tiers:
            alloc = view.pack(n, view.nodes_of(kind, tier))
            if alloc is not None:
                return Decision(alloc, parallelism=n)
    if not kinds and n > max((view.capacity(k) for k in view.kinds()), default=0):
        alloc = view.pack(n)
        if alloc is not None:
            return Decision(alloc, parallelism=n)
    return None


def gpus_per_node(view: ClusterView) -> dict[str, int]:
    """Largest node size per kind (memoised on the view)."""
    return view.gpus_per_node()


def grow(
    view: ClusterView, job: JobRun, kind: str, count: int, take: bool = True
) -> dict[int, int] | None:
    """`count` more GPUs of `kind` for a running job: its own nodes first, then best fit."""
    extra: dict[int, int] = {}
    left = count
    for node_id in job.alloc:
        if view.node(node_id).kind == kind and view.free.get(node_id, 0) > 0 and left:
            n = min(left, view.free[node_id])
            extra[node_id] = n
            left -= n
    if left:
        others = [i for i in view.nodes_of(kind) if i not in extra]
        rest = view.pack(left, others, take=False)
        if rest is None:
            return None
        extra.update(rest)
    if take:
        view.take(extra)
    return extra


def retune(job: JobRun, decisions: dict[str, Decision], min_gain: float = 0.05) -> None:
    """Keep a running elastic job's GPUs but move it to its goodput-best batch size.

    Adaptive-batch runtimes change the batch between steps without a restart; this matters
    after a revocation shrank the job under a batch chosen for more GPUs. Only a predicted gain
    above `min_gain` triggers a change (AdaptDL's threshold against flapping).
    """
    model = goodput_model(job.spec.app)
    batch, rate = model.best_batch(job.counts, job.num_nodes, job.progress)
    now = model.progress_rate(job.counts, job.num_nodes, job.batch_size, job.progress)
    if rate > now * (1.0 + min_gain):
        decisions[job.name] = Decision(dict(job.alloc), batch)
