"""Nodes and cluster specifications.

A cluster is a list of nodes; a node holds a number of GPUs of one kind and is bought on one
pricing tier (`on_demand` or `spot`). A cluster spec is text, e.g. `16x4xt4` (16 nodes of 4 T4s) or
`8x4xv100,4x4xp100,4x4xt4`; an item may end in `:spot` or `:on_demand` (in any case, `-` for `_`,
as `shoal transient --cluster` reads them). Named presets cover the clusters of the papers we
compare against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from shoal.errors import UserError
from shoal.perf.devices import TIERS, load_devices

PRESETS = {
    # Pollux's simulator: 16 nodes x 4 T4 (its traces were measured there)
    "pollux": "16x4xt4",
    # EasyScale's simulator: 32 V100, 16 P100, 16 T4
    "easyscale": "8x4xv100,4x4xp100,4x4xt4",
    # a heterogeneous 1,024-GPU cluster for trace-scale runs
    "hetero-1024": "64x4xv100,64x4xp100,64x4xt4,64x4xk80",
    # heterogeneous, 64 GPUs
    "hetero-64": "4x4xv100,4x4xp100,4x4xt4,4x4xk80",
}


@dataclass(frozen=True)
class NodeGroup:
    count: int
    gpus_per_node: int
    kind: str
    tier: str = "on_demand"

    def __post_init__(self) -> None:
        if self.count < 1 or self.gpus_per_node < 1:
            raise ValueError("node count and GPUs per node must be >= 1")


@dataclass(frozen=True)
class ClusterSpec:
    groups: tuple[NodeGroup, ...]

    @property
    def num_gpus(self) -> int:
        return sum(g.count * g.gpus_per_node for g in self.groups)

    def with_spot_fraction(self, fraction: float) -> ClusterSpec:
        """The same cluster with `fraction` of each group's nodes bought as spot (`spot_nodes`)."""
        if not 0 <= fraction <= 1:
            raise UserError(f"spot fraction must be in [0, 1], got {fraction}")
        groups: list[NodeGroup] = []
        for g in self.groups:
            spot = spot_nodes(g.count, fraction)
            if g.count - spot:
                groups.append(NodeGroup(g.count - spot, g.gpus_per_node, g.kind, g.tier))
            if spot:
                groups.append(NodeGroup(spot, g.gpus_per_node, g.kind, "spot"))
        return ClusterSpec(tuple(groups))


def spot_nodes(count: int, fraction: float) -> int:
    """How many of a group's `count` nodes `fraction` buys as spot: count x fraction rounded
    half up, in the decimal the user wrote (0.3 x 5 is 1.5, so 2). Python's round() took halves
    to even: at 0.5, 1 node bought 0, 3 bought 2 but 5 also 2."""
    exact = Decimal(repr(fraction)) * count
    return int(exact.to_integral_value(rounding=ROUND_HALF_UP))


MAX_GPUS = 100_000  # the largest clusters built; the simulator's rounds are O(nodes)
# [0-9], not \d: other scripts' digits are \d, and int() reads them ('２' is 2)
_ITEM = re.compile(r"([0-9]+)x([0-9]+)x([A-Za-z0-9]+)(?::([A-Za-z_-]+))?")


def parse_cluster(spec: str) -> ClusterSpec:
    """Parse a preset name or a spec such as `16x4xt4` or `4x4xv100:spot,4x4xt4`."""
    text = PRESETS.get(spec, spec)
    kinds = load_devices()
    groups = []
    items = [s.strip() for s in text.split(",")] if text.strip() else []
    for position, item in enumerate(items, start=1):
        if not item:  # a stray comma, or a group left out: refused, as --workers does
            raise UserError(f"cluster spec {spec!r}: item {position} is empty")
        match = _ITEM.fullmatch(item)
        if not match:
            raise UserError(
                f"bad cluster item {item!r}: expected NODESxGPUSxKIND[:TIER] or a preset "
                f"({', '.join(PRESETS)})"
            )
        count, per_node = int(match.group(1)), int(match.group(2))
        if count < 1 or per_node < 1:
            raise UserError(f"bad cluster item {item!r}: counts must be >= 1")
        tier = (match.group(4) or "on_demand").lower().replace("-", "_")  # SPOT, on-demand
        if tier not in TIERS:
            raise UserError(f"bad cluster item {item!r}: tier must be spot or on_demand")
        groups.append(NodeGroup(count, per_node, kinds.check(match.group(3)), tier))
    if not groups:
        raise UserError("empty cluster spec")
    gpus = sum(g.count * g.gpus_per_node for g in groups)
    if gpus > MAX_GPUS:  # one object per node: 10^8 nodes ran out of memory without a word
        raise UserError(f"cluster {spec!r} has {gpus:,} GPUs, more than {MAX_GPUS:,}")
    return ClusterSpec(tuple(groups))
