import time

import pytest

from shoal.config import EmulationConfig
from shoal.errors import UserError
from shoal.runtime import pacing
from shoal.runtime.pacing import WINDOW, Pacer


def test_pads_the_step_to_the_slowdown_times_the_median_compute_time():
    pacer = Pacer(3.0)
    for s in (0.010, 0.011, 0.012):
        pacer.observe(s)
    t0 = time.perf_counter()
    assert pacer.pad(2, 0.022) == pytest.approx(3.0 * 2 * 0.011)
    assert time.perf_counter() - t0 >= 0.066 - 0.022 - 0.002
    # a hiccup is not amplified: the median moves by one sample at most
    pacer.observe(0.5)
    assert pacer.pad(1, 0.0) == pytest.approx(3.0 * 0.0115)
    assert pacer.pad(1, 0.2) == pytest.approx(0.2)  # slower than the target: no sleep


def test_a_fixed_yardstick_ignores_measurements():
    pacer = Pacer(3.0, host_s=0.01)
    assert pacer.pad(2, 0.0) == pytest.approx(0.06)  # no measurement needed
    pacer.observe(0.5)
    assert pacer.pad(2, 0.02) == pytest.approx(0.06)
    with pytest.raises(ValueError):
        Pacer(3.0, host_s=0.0)


def test_bad_yardstick_in_the_environment_is_a_user_error(monkeypatch):
    monkeypatch.setenv("SHOAL_EMULATED_HOST_S", "fast")
    with pytest.raises(UserError, match="SHOAL_EMULATED_HOST_S"):
        EmulationConfig.from_environ()
    monkeypatch.setenv("SHOAL_EMULATED_HOST_S", "0.004")
    monkeypatch.setenv("SHOAL_SLOWDOWN", "3")
    emulation = EmulationConfig.from_environ()
    assert Pacer(emulation.slowdown, emulation.host_s) == Pacer(3.0, 0.004)


def test_host_speed_follows_recent_micro_batches():
    pacer = Pacer(2.0)
    for _ in range(WINDOW):
        pacer.observe(0.001)
    for _ in range(WINDOW):
        pacer.observe(0.002)  # the host got slower (e.g. another worker shares it now)
    # 2.0 x the median of the last WINDOW samples (all 0.002); were the older ones still
    # counted, the median of all 2 x WINDOW would be 0.0015 and the target 0.003
    assert pacer.pad(1, 0.0) == pytest.approx(0.004)


def test_fastest_kind_is_not_padded():
    pacer = Pacer(1.0)
    pacer.observe(0.1)
    assert pacer.pad(4, 0.5) == 0.5
    assert Pacer(3.0).pad(1, 0.5) == 0.5  # nothing observed yet: no estimate, no wait
    with pytest.raises(ValueError):
        Pacer(0.5)


def test_wait_out_counts_host_work_done_inside_the_emulated_time(monkeypatch):
    waits = []

    def wait(seconds):  # the wait it asks for, and the real one
        waits.append(seconds)
        real_wait(seconds)

    real_wait = pacing._wait
    monkeypatch.setattr(pacing, "_wait", wait)
    pacer = Pacer(3.0, host_s=0.1)
    target = pacer.target_s(1)
    assert target == pytest.approx(0.3)
    t0 = time.perf_counter()
    # 0.2 s of host work (reading ahead) already done inside the kind's time: it waits the
    # rest, 0.1 s, not the whole 0.3 s (asked for exactly; how long a loaded host takes to
    # wake up after it is no part of the pacer's arithmetic)
    assert pacer.wait_out(target, 0.2) == pytest.approx(0.3)
    assert waits == [pytest.approx(0.1)]
    assert time.perf_counter() - t0 >= 0.1
    # longer than the kind's time: the step takes as long as the host work, without waiting
    assert pacer.wait_out(0.01, 0.03) == 0.03
    assert len(waits) == 1
    assert Pacer(1.0).target_s(1) is None  # no kind: nothing to wait out
    assert Pacer(3.0).target_s(1) is None  # no yardstick yet


def test_the_emulated_exchange_adds_its_time_once_per_call(monkeypatch):
    assert Pacer(1.0).sync_s == 0.0
    pacer = Pacer(1.0, sync_s=0.03)
    t0 = time.perf_counter()
    pacer.exchange()
    assert time.perf_counter() - t0 >= 0.03
    monkeypatch.setenv("SHOAL_EMULATED_SYNC_S", "0.02")
    assert EmulationConfig.from_environ().sync_s == 0.02
    monkeypatch.setenv("SHOAL_EMULATED_SYNC_S", "-1")
    with pytest.raises(UserError, match="SHOAL_EMULATED_SYNC_S must be >= 0"):
        EmulationConfig.from_environ()


def test_a_fixed_yardstick_paces_the_fastest_kind_too():
    assert Pacer(1.0, host_s=0.01).target_s(3) == pytest.approx(0.03)
    assert Pacer(1.0).target_s(3) is None  # measured: the fastest kind sets the pace
