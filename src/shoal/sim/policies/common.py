"""Placement helpers shared by several policies (gang placement, kind preference)."""

from __future__ import annotations

from shoal.cluster.kinds import load_kinds
from shoal.sim.jobs import JobRun
from shoal.sim.policy import ClusterView


def kinds_by_speed(view: ClusterView, app: str) -> list[str]:
    """The cluster's kinds, fastest first for `app`."""
    table = load_kinds()
    return sorted(view.kinds(), key=lambda k: (-table.app_speed(k, app), k))


def place_gang(
    view: ClusterView, job: JobRun, tiers: tuple[str | None, ...] = (None,)
) -> dict[int, int] | None:
    """Requested GPUs of one kind (preferred, else fastest that fits); None if none fits."""
    kinds = [job.spec.preferred_kind] if job.spec.preferred_kind else None
    for kind in kinds or kinds_by_speed(view, job.spec.app):
        for tier in tiers:
            alloc = view.pack(job.spec.requested_gpus, view.nodes_of(kind, tier))
            if alloc is not None:
                return alloc
    return None


def gpus_per_node(view: ClusterView) -> dict[str, int]:
    """Largest node size per kind (to estimate how many nodes a count spans)."""
    sizes: dict[str, int] = {}
    for node in view.nodes:
        sizes[node.kind] = max(sizes.get(node.kind, 0), node.num_gpus)
    return sizes
