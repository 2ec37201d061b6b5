"""The one device table: workload speeds (the launcher), app speeds and prices (the simulator)."""

import json
import math
from importlib import resources

import pytest

from shoal.errors import UserError
from shoal.perf.devices import MAX_WORKERS, load_devices
from shoal.perf.profiles import load_profile

WORKLOAD = "Transformer (batch size 32)"


def test_workload_speed_is_relative_to_the_fastest_measured_kind():
    d = load_devices()
    speeds = {k: d.workload_speed(k, WORKLOAD) for k in ("k80", "p100", "v100")}
    assert max(speeds.values()) == 1.0 and speeds["k80"] < speeds["p100"]
    # the Gavel figure the emulation tests and the hetero benchmark rely on
    assert speeds["v100"] / speeds["k80"] == pytest.approx(3.03, abs=0.01)
    assert 0 < d.workload_speed("k80") < d.workload_speed("v100") < 1.0  # a geometric mean


def test_kind_without_measured_throughput_has_no_workload_speed():
    with pytest.raises(UserError, match="no measured throughput for device kind 't4'"):
        load_devices().workload_speed("t4", WORKLOAD)


def test_unknown_kind_names_the_known_ones():
    known = r"\(known: k80, p100, t4, v100\)"
    with pytest.raises(UserError, match=f"unknown device kind .tpu9. {known}"):
        load_devices().kind("tpu9")


def test_parse_workers():
    assert load_devices().parse_workers("2xV100,k80") == ["v100", "v100", "k80"]
    with pytest.raises(UserError, match="bad worker count"):
        load_devices().parse_workers("0xk80")
    assert len(load_devices().parse_workers(f"{MAX_WORKERS}xk80")) == MAX_WORKERS
    for spec in (f"{MAX_WORKERS + 1}xk80", f"{MAX_WORKERS}xk80,v100"):
        with pytest.raises(UserError, match=f"more than {MAX_WORKERS} workers"):
            load_devices().parse_workers(spec)


@pytest.mark.parametrize(
    ("item", "hint"),
    [
        ("k80:spot", "; a :TIER needs --provider local"),
        ("2xk80:on-demand", "; a :TIER needs --provider local"),
        ("\uff12xk80", "; N in ASCII digits"),  # a fullwidth 2
        ("k80!", ""),
    ],
)
def test_a_bad_worker_item_says_what_would_fix_it(item, hint):
    expected = f"bad worker spec item {item!r} (expected KIND or NxKIND{hint})"
    with pytest.raises(UserError) as info:
        load_devices().parse_workers(item)
    assert str(info.value) == expected


def test_app_speed_is_in_t4_units_and_prices_per_tier():
    d = load_devices()
    assert d.app_speed("t4", "cifar10") == 1.0
    assert d.app_speed("v100", "cifar10") > d.app_speed("p100", "cifar10") > 1.0
    assert d.price("t4", "spot") == 0.11 and d.price("v100", "on_demand") == 2.144
    with pytest.raises(UserError, match="unknown pricing tier"):
        d.price("t4", "reserved")
    assert d.memory_gib == {"k80": 12, "p100": 16, "t4": 16, "v100": 16}


def test_app_speed_joins_gavel_and_pollux_through_the_t4_anchors():
    """The module's join, from the shipped tables: V100/T4 is the geometric mean over the
    anchors of Gavel's V100 steps/s x Pollux's T4 s/step; a kind's speed on an application is
    Gavel's ratio to V100 on its stand-in workload (or, with none, of the kinds' mean speeds)
    times V100/T4."""
    d = load_devices()
    spec = json.loads(resources.files("shoal.data").joinpath("devices.json").read_text())
    v100 = d.kind("v100").throughput_steps_per_s
    logs = [
        math.log(v100[a["workload"]] * load_profile(a["app"]).step_time_s(1, 1, a["local_bsz"]))
        for a in spec["t4_anchor"]
    ]
    assert len(logs) > 1  # a mean, not one pair
    v100_over_t4 = math.exp(sum(logs) / len(logs))
    assert "ncf" not in spec["app_workloads"]  # no same-model Gavel workload
    for kind in ("k80", "p100", "v100"):
        for app, workload in spec["app_workloads"].items():
            ratio = d.kind(kind).throughput_steps_per_s[workload] / v100[workload]
            assert d.app_speed(kind, app) == pytest.approx(ratio * v100_over_t4)
        mean_ratio = d.workload_speed(kind) / d.workload_speed("v100")
        assert d.app_speed(kind, "ncf") == pytest.approx(mean_ratio * v100_over_t4)


def test_the_table_is_loaded_once():
    assert load_devices() is load_devices()
