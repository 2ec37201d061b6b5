"""The goodput-best batch size of a job on a placement (Pollux's choice, shared by both drivers).

The statistical-efficiency model and the step time live in `shoal.perf.goodput`; this decides:
for a placement (GPUs per kind, the GPUs per node of each kind) and the job's progress, the batch
size that maximises goodput, and the goodput it gives. The simulator's policies decide with it;
the live controller will (issues 13/14).
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.perf.goodput import goodput_model

PROFILE_UNIT = (("t4", 1),)  # one GPU of the profiled kind: the unit of speedup


def placement_key(counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, n) for k, n in counts.items() if n))


def nodes_needed(counts: Mapping[str, int], per_node: Mapping[str, int]) -> int:
    """Nodes a consolidated placement of `counts` spans."""
    return sum(-(-n // per_node[k]) for k, n in counts.items() if n)


def best_batch(app: str, counts: Mapping[str, int], num_nodes: int, progress: float):
    """(batch size, goodput) maximising goodput of `app` on this placement at `progress`."""
    key = placement_key(counts)
    if not key:
        return None, 0.0
    return goodput_model(app).best_batch(key, num_nodes, progress)


def unit_goodput(app: str, progress: float) -> float:
    """Goodput of one profiled-kind GPU: the unit a speedup is measured in."""
    return goodput_model(app).best_batch(PROFILE_UNIT, 1, progress)[1]
