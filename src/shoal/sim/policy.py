"""The one interface every scheduling policy implements, and the view of the cluster it gets.

Each scheduling round the simulator calls `policy.schedule(view)`. The policy returns decisions
only for the jobs whose allocation (or batch size) it wants to change: a `Decision` with an empty
allocation preempts (elastic jobs are checkpointed on preemption and lose no work). Policies read
state from `ClusterView` and place GPUs with its packing helpers; they never mutate state.
Two attributes describe the policy's runtime rather than its decisions: `periodic` (re-plan every
tick while jobs are active, as Pollux does every 60 s, instead of only after events) and
`inplace_rescale` (the job's runtime rescales in place, costing `rescale_s`, instead of by
checkpoint-restart, costing `restart_s`). A periodic policy whose plan moves only with events
(arrivals, completions, revocations), never with time alone, may set an optional `quiesce = True`
to let the simulator pause its rounds after a round that changed nothing. A policy that runs
every job as a gang of its requested GPUs, elastic or not, sets an optional `gangs_only = True`,
so the simulator refuses a job wider than the cluster before any work, as it does a gang job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from shoal.perf.goodput import Counts
from shoal.sim.jobs import JobRun


@dataclass(frozen=True)
class Decision:
    alloc: dict[int, int]  # node id -> GPUs; {} = preempt
    batch_size: float | None = None  # None: the job's own batch size
    parallelism: int | None = None  # fixed indivisible work units (EasyScale threads)


@dataclass
class Node:
    node_id: int
    kind: str
    tier: str
    num_gpus: int
    free: int
    alive: bool = True
    price_usd_per_hour: float = 0.0  # per GPU
    revoke_s: float = float("inf")


@dataclass
class ClusterView:
    now_s: float
    nodes: list[Node]
    pending: list[JobRun]  # arrived, not running, in arrival order
    running: list[JobRun]
    free: dict[int, int] = field(default_factory=dict)  # node id -> free GPUs (policy scratch)

    def __post_init__(self) -> None:
        self.free = {n.node_id: n.free for n in self.nodes if n.alive and n.free}
        self._memo: dict = {}

    @property
    def free_gpus(self) -> int:
        return sum(self.free.values())

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def kinds(self) -> list[str]:
        if "kinds" not in self._memo:
            self._memo["kinds"] = sorted({n.kind for n in self.nodes if n.alive})
        return self._memo["kinds"]

    def gpus_per_node(self) -> dict[str, int]:
        """Largest node size per kind (to estimate how many nodes a count spans)."""
        if "per_node" not in self._memo:
            sizes: dict[str, int] = {}
            for node in self.nodes:
                sizes[node.kind] = max(sizes.get(node.kind, 0), node.num_gpus)
            self._memo["per_node"] = sizes
        return self._memo["per_node"]

    def capacity(self, kind: str | None = None) -> int:
        return sum(n.num_gpus for n in self.nodes if n.alive and kind in (None, n.kind))

    def release(self, alloc: dict[int, int]) -> None:
        """Return a job's GPUs to the scratch free pool (for plans that move jobs)."""
        for node_id, n in alloc.items():
            if self.nodes[node_id].alive:
                self.free[node_id] = self.free.get(node_id, 0) + n

    def take(self, alloc: dict[int, int]) -> None:
        for node_id, n in alloc.items():
            assert self.free[node_id] >= n, "policy over-allocated a node"
            self.free[node_id] -= n

    def pack(
        self, count: int, nodes: Iterable[int] | None = None, take: bool = True
    ) -> dict[int, int] | None:
        """Place `count` GPUs on the fewest nodes among `nodes` (default: all); None if short.

        Best fit: a node that alone holds the whole request and wastes the least, else the
        fullest-free nodes first, so jobs stay consolidated and large holes stay open.
        """
        if count <= 0:
            return {}
        ids = [i for i in (self.free if nodes is None else nodes) if self.free.get(i, 0) > 0]
        if sum(self.free[i] for i in ids) < count:
            return None
        fits = [i for i in ids if self.free[i] >= count]
        if fits:
            best = min(fits, key=lambda i: (self.free[i], i))
            alloc = {best: count}
        else:
            alloc = {}
            left = count
            for i in sorted(ids, key=lambda i: (-self.free[i], i)):
                n = min(left, self.free[i])
                alloc[i] = n
                left -= n
                if left == 0:
                    break
        if take:
            self.take(alloc)
        return alloc

    def nodes_of(self, kind: str | None = None, tier: str | None = None) -> list[int]:
        """Alive nodes of a kind and tier that have free GPUs right now."""
        nodes = self.nodes
        return [
            i
            for i, f in self.free.items()
            if f > 0 and kind in (None, nodes[i].kind) and tier in (None, nodes[i].tier)
        ]


def counts_of(alloc: dict[int, int], nodes: list[Node]) -> tuple[Counts, int]:
    """(sorted per-kind GPU counts, number of nodes) of an allocation."""
    by_kind: dict[str, int] = {}
    for node_id, n in alloc.items():
        if n:
            by_kind[nodes[node_id].kind] = by_kind.get(nodes[node_id].kind, 0) + n
    return tuple(sorted(by_kind.items())), sum(1 for n in alloc.values() if n)


class Policy(Protocol):
    name: str
    periodic: bool
    inplace_rescale: bool

    def schedule(self, view: ClusterView) -> dict[str, Decision]:
        """Decisions for the jobs whose allocation changes this round, by job name."""
        ...
