"""Cluster specs: spot fractions round half up per node group."""

import pytest

from shoal.cluster.nodes import parse_cluster


def _spot_nodes(spec: str, fraction: float) -> int:
    cluster = parse_cluster(spec).with_spot_fraction(fraction)
    return sum(g.count for g in cluster.groups if g.tier == "spot")


@pytest.mark.parametrize(
    "nodes, fraction, spot",
    [
        # round() took halves to even: 1 -> 0, 3 -> 2, 5 -> 2, 7 -> 4
        (1, 0.5, 1),
        (3, 0.5, 2),
        (5, 0.5, 3),
        (7, 0.5, 4),
        (2, 0.25, 1),  # was 0: no spot at all
        (5, 0.3, 2),  # 1.5 in the decimal written, though 0.3 x 5 is a hair under in binary
        (3, 1 / 3, 1),
        (4, 0.5, 2),
        (4, 0.0, 0),
        (4, 1.0, 4),
    ],
)
def test_spot_fraction_rounds_half_up_per_group(nodes, fraction, spot):
    assert _spot_nodes(f"{nodes}x4xt4", fraction) == spot
    # each group on its own; the node count is kept
    both = parse_cluster(f"{nodes}x4xt4,{nodes}x2xk80").with_spot_fraction(fraction)
    assert _spot_nodes(f"{nodes}x4xt4,{nodes}x2xk80", fraction) == 2 * spot
    assert sum(g.count for g in both.groups) == 2 * nodes


def test_spot_fraction_keeps_spot_groups_spot():
    assert _spot_nodes("3x4xt4:spot,3x4xk80", 0.0) == 3


@pytest.mark.parametrize(
    "spec, position", [("4x4xt4,,4x4xv100", 2), ("4x4xt4,", 2), (",4x4xt4", 1), ("4x4xt4, ,k", 2)]
)
def test_empty_items_are_refused(spec, position):
    """They were skipped without a word (a missing group, a stray comma), where --workers
    refuses an empty item."""
    from shoal.errors import UserError

    with pytest.raises(UserError, match=f"^cluster spec {spec!r}: item {position} is empty$"):
        parse_cluster(spec)
    with pytest.raises(UserError, match="^empty cluster spec$"):
        parse_cluster(" ")


@pytest.mark.parametrize(
    "spec, tier",
    [
        ("4x4xv100:SPOT", "spot"),
        ("4x4xv100:Spot", "spot"),
        ("4x4xv100:on-demand", "on_demand"),
        ("4x4xv100:ON_DEMAND", "on_demand"),
        ("4x4xv100:on_demand", "on_demand"),
        ("4x4xV100", "on_demand"),
    ],
)
def test_tier_in_any_case(spec, tier):
    """`:SPOT` and `:on-demand` were 'bad cluster item' here, where `shoal transient --cluster`
    takes them."""
    (group,) = parse_cluster(spec).groups
    assert (group.count, group.gpus_per_node, group.kind, group.tier) == (4, 4, "v100", tier)


@pytest.mark.parametrize("item", ["4x4xv100:cheap", "4x4xv100:spot_", "4x4xt4:-"])
def test_unknown_tier_is_named(item):
    from shoal.errors import UserError

    message = f"^bad cluster item {item!r}: tier must be spot or on_demand$"
    with pytest.raises(UserError, match=message):
        parse_cluster(f"2x4xt4,{item}")
