import time

import pytest

from shoal.runtime.pacing import Pacer


def test_pads_to_the_slowdown_times_the_best_compute_time():
    pacer = Pacer(3.0)
    t0 = time.perf_counter()
    assert pacer.pad(0.02) == pytest.approx(0.06)
    assert time.perf_counter() - t0 >= 0.04
    # a contended micro-batch is not amplified: its target stays 3 x the best time
    assert pacer.pad(0.05) == pytest.approx(0.06)
    assert pacer.pad(0.1) == pytest.approx(0.1)  # slower than the target: no sleep


def test_fastest_kind_is_not_padded():
    assert Pacer(1.0).pad(0.5) == 0.5
    with pytest.raises(ValueError):
        Pacer(0.5)
