"""The one device table: workload speeds (the launcher), app speeds and prices (the simulator)."""

import pytest

from shoal.errors import UserError
from shoal.perf.devices import load_devices

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


def test_app_speed_is_in_t4_units_and_prices_per_tier():
    d = load_devices()
    assert d.app_speed("t4", "cifar10") == 1.0
    assert d.app_speed("v100", "cifar10") > d.app_speed("p100", "cifar10") > 1.0
    assert d.price("t4", "spot") == 0.11 and d.price("v100", "on_demand") == 2.144
    with pytest.raises(UserError, match="unknown pricing tier"):
        d.price("t4", "reserved")


def test_the_table_is_loaded_once():
    assert load_devices() is load_devices()
