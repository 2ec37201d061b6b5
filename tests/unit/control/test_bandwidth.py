"""The bandwidth-adaptive controller on hand-made measurements: the wire-size model, the choice
of keep ratio and batch scale, hysteresis, and one-line errors for bad settings."""

import pytest

from shoal.control.bandwidth import (
    BandwidthConfig,
    BandwidthController,
    LinkSample,
    entries,
    message_bytes,
    parse_sites,
    sent_bytes_per_site,
    validate_slow_link,
)
from shoal.errors import UserError

SIZES = [1_000_000, 100_000, 1000]  # about 4.4 MB of fp32 gradient
MBIT = 1e6 / 8  # bytes per second in one Mbit/s


def test_wire_sizes():
    assert entries(1000, 0.01) == 10 and entries(10, 0.01) == 1 and entries(10, 1.0) == 10
    assert message_bytes(65536, 10) == 60  # uint16 indices up to 65536 entries
    assert message_bytes(65537, 10) == 80
    dense = sent_bytes_per_site([1000], 1.0, 2)
    assert dense == 4000  # ring all-reduce: 2 (W-1)/W of 4 bytes per entry
    assert sent_bytes_per_site([1000], 0.01, 3) == 2 * 10 * 6
    assert sent_bytes_per_site([1000], 0.01, 1) == 0


def _measure(ctrl, rate_bytes_per_s, compute_s):
    """What a leader measures for a step run at the controller's current keep ratio."""
    sent = sent_bytes_per_site(ctrl.sizes, ctrl.keep_ratio, ctrl.num_sites)
    return LinkSample(sent, sent / rate_bytes_per_s, compute_s)


def _run(ctrl, rate_mbit, steps, compute_s=0.1):
    return [ctrl.observe(_measure(ctrl, rate_mbit * MBIT, compute_s)) for _ in range(steps)]


def test_picks_the_largest_ratio_that_hides_under_compute():
    ctrl = BandwidthController(SIZES, 2)
    decision = _run(ctrl, 100, 1)[-1]
    budget = 0.8 * 0.1
    assert decision.comm_s <= budget
    assert ctrl.comm_s(decision.keep_ratio * 2) > budget  # the rung above would not hide
    assert decision.batch_scale == 1.0
    fast = BandwidthController(SIZES, 2)
    assert _run(fast, 100_000, 1)[-1].keep_ratio == 1.0  # dense hides on a fast link


def test_follows_rate_changes_within_a_few_steps_without_thrashing():
    ctrl = BandwidthController(SIZES, 2)
    ratios = []
    for rate in (1000, 100, 500):  # Mbit/s: a fast link, a drop, a partial recovery
        ratios.append([d.keep_ratio for d in _run(ctrl, rate, 12)])
    at_1g, at_100m, at_500m = ratios
    assert at_1g[-1] > at_100m[0]  # the drop is followed at the very next step
    assert len(set(at_100m)) == 1  # steady rate: no thrashing
    assert at_500m[-1] > at_100m[-1]  # the recovery is followed ...
    steps_to_settle = at_500m.index(at_500m[-1])
    assert 0 < steps_to_settle <= 6  # ... after a few steps of patience, not at once
    assert len(set(at_500m[steps_to_settle:])) == 1


def test_noise_around_a_rung_boundary_does_not_thrash():
    ctrl = BandwidthController(SIZES, 2, BandwidthConfig(smoothing=1.0))
    _run(ctrl, 100, 3)
    settled = ctrl.keep_ratio
    changes = 0
    for i in range(30):
        before = ctrl.keep_ratio
        _run(ctrl, 100 * (1.25 if i % 2 else 0.95), 1)  # +-25 % jitter in measured rate
        changes += ctrl.keep_ratio != before
    assert changes <= 2 and ctrl.keep_ratio <= 2 * settled


def test_grows_the_batch_when_even_the_sparsest_message_cannot_hide():
    ctrl = BandwidthController(SIZES, 2, BandwidthConfig(min_keep_ratio=0.01))
    decision = _run(ctrl, 0.5, 2, compute_s=0.01)[-1]  # 0.5 Mbit/s, 10 ms of compute
    assert decision.keep_ratio == pytest.approx(ctrl.rungs[-1])
    assert 1.0 < decision.batch_scale <= 4.0


def test_one_site_stays_dense():
    ctrl = BandwidthController(SIZES, 1)
    decision = ctrl.observe(LinkSample(0, 0.001, 0.1))
    assert decision.keep_ratio == 1.0 and decision.batch_scale == 1.0


@pytest.mark.parametrize(
    "call",
    [
        lambda: validate_slow_link(keep_ratio=0.0),
        lambda: validate_slow_link(keep_ratio=1.0),
        lambda: validate_slow_link(keep_ratio=1.5),
        lambda: validate_slow_link(local_steps=0),
        lambda: validate_slow_link(local_steps=2.5),
        lambda: BandwidthConfig(headroom=0),
        lambda: BandwidthConfig(min_keep_ratio=2),
        lambda: BandwidthConfig(ladder_factor=1),
        lambda: BandwidthController([], 2),
        lambda: BandwidthController(SIZES, 2).observe(LinkSample(10, 0, 0.1)),
        lambda: parse_sites("0,1//2", 3),  # a site naming no worker
        lambda: parse_sites("0,1/2,x", 3),
        lambda: parse_sites("0,1/2,3", 3),
        lambda: parse_sites("0,1/1,2", 3),
        lambda: parse_sites("0/2", 3),
    ],
)
def test_bad_input_is_one_line_user_error(call):
    with pytest.raises(UserError) as info:
        call()
    assert "\n" not in str(info.value)


def test_valid_settings_pass():
    assert parse_sites("0, 1/2", 3) == ((0, 1), (2,))
    validate_slow_link(keep_ratio=0.01, local_steps=1)
    validate_slow_link()
    assert BandwidthConfig().ladder()[0] == 1.0


def test_a_well_hidden_exchange_never_lowers_the_estimate():
    ctrl = BandwidthController(SIZES, 2)
    ctrl.observe(LinkSample(1e6, 0.01, 0.1))  # 100 MB/s
    ctrl.observe(LinkSample(1e4, 0.001, 0.1))  # tiny message, mostly overhead: 10 MB/s
    assert ctrl.link_bytes_per_s == pytest.approx(1e8)
    ctrl.observe(LinkSample(1e6, 0.1, 0.1))  # an exchange that overruns: believed at once
    assert ctrl.link_bytes_per_s == pytest.approx(1e7)


def test_the_fixed_cost_of_an_exchange_is_not_taken_for_a_slow_link():
    ctrl = BandwidthController(SIZES, 2)
    ctrl.observe(LinkSample(1e6, 0.03, 0.1, overhead_s=0.02))  # 1 MB in 10 ms of wire time
    assert ctrl.link_bytes_per_s == pytest.approx(1e8)
    assert ctrl.comm_s(1.0) == pytest.approx(0.02 + sent_bytes_per_site(SIZES, 1.0, 2) / 1e8)


def test_a_failed_probe_up_is_not_retried_every_few_steps():
    ctrl = BandwidthController(SIZES, 2)
    _run(ctrl, 100, 1)
    low = ctrl.keep_ratio
    # The measured rate says the rung above fits, but taking it overruns (say a burst allowance
    # made small messages look fast): it must go up, come back, and wait longer next time.
    probes = []  # the steps that tried a rung above `low`
    for step in range(80):
        rate = 400 if ctrl.keep_ratio <= low else 40
        ctrl.observe(_measure(ctrl, rate * MBIT, 0.1))
        probes += [step] if ctrl.keep_ratio > low else []
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert len(probes) >= 3 and all(b > a for a, b in zip(gaps, gaps[1:]))
