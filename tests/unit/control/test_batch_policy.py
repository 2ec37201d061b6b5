"""Each batch policy's decision on hand-made statistics equals a hand computation; state round
trips give identical later decisions; bad input is one line.

The throughput model used by hand: a step costs 0.1 s plus 1 ms per sample, so
throughput(B) = B / (0.1 + 0.001 B). With noise scale phi, Pollux's efficiency is
(phi + B0) / (phi + B), so goodput is proportional to B / ((0.1 + 0.001 B)(phi + B)), whose
maximum is at B* = sqrt(0.1 phi / 0.001) (set the log-derivative to zero): B* = 100 for phi = 100.
"""

import json
import math

import pytest

from shoal.control.batch_policy import make_policy
from shoal.control.batch_policy_base import BatchContext, needs_similarity, parse_bounds
from shoal.control.gradstats import StepStats, synthetic_stats
from shoal.errors import UserError


def _throughput(batch):
    return batch / (0.1 + 0.001 * batch)


def _context(b=10, bounds=(10, 1000), cap=None, b0=10):
    return BatchContext(b, bounds, cap, _throughput, b0)


def _stats(step, b, m, similarity=None, loss=1.0, grad_sqr=1.0, grad_var=100.0):
    s = synthetic_stats(step, b, m, grad_sqr, grad_var, loss)
    return StepStats(s.step, b, m, s.sqnorms, s.mean_sqnorm, similarity, loss)


def test_fixed_keeps_the_job_batch_and_obeys_the_cap():
    p = make_policy("fixed", micro_batch_size=10, bounds=None)
    assert p.decide(_stats(0, 10, 4), _context(b0=40)) == 40
    assert p.decide(_stats(1, 10, 4), _context(b0=40, cap=3)) == 30
    assert p.decide(_stats(2, 10, 3), _context(b0=40)) == 40  # back once it fits
    assert not needs_similarity(p, 99)


def test_jabas_rule_by_hand():
    p = make_policy("jabas", micro_batch_size=32, bounds=(64, 512), every=10, gamma=0.1, alpha=0.1)
    ctx = _context(b=32, bounds=(32, 4096), b0=320)
    assert needs_similarity(p, 9) and not needs_similarity(p, 10)
    assert p.decide(_stats(3, 32, 10, similarity=0.0), ctx) == 320  # not a decision step
    assert p.decide(_stats(9, 32, 10, similarity=None), ctx) == 320  # nothing measured
    assert p.decide(_stats(9, 32, 10, similarity=0.05), ctx) == 352  # 320 x 1.1 = 11 x 32
    assert p.decide(_stats(19, 32, 10, similarity=0.5), ctx) == 288  # 320 x 0.9 = 9 x 32
    assert p.decide(_stats(29, 32, 4, similarity=0.5), ctx) == 96  # 128 x 0.9 -> 3 micro-batches
    assert p.decide(_stats(39, 32, 16, similarity=-0.3), ctx) == 512  # 563.2 -> 18, bound 512
    assert p.decide(_stats(49, 32, 2, similarity=0.9), ctx) == 64  # lower bound
    assert p.decide(_stats(59, 32, 10, similarity=0.1), ctx) == 320  # on target: stay
    assert p.decide(_stats(69, 32, 10, similarity=0.0), _context(32, (32, 4096), 10, 320)) == 320
    assert p.state_dict()["trajectory"][0] == [4, 320]
    assert p.decide(_stats(79, 32, 1), _context(32, (32, 4096), None, 32)) == 64  # M=1: no halves


def test_pollux_picks_the_goodput_optimum_by_hand():
    p = make_policy("pollux", micro_batch_size=10, bounds=None, every=1)
    assert p.decide(_stats(0, 10, 2), _context()) == 100  # B* = sqrt(0.1 * 100 / 0.001)
    assert p.decide(_stats(1, 10, 10), _context(cap=5)) == 50  # the cap binds
    # phi = 400: B* = 200, on the enumerated multiples of 10 inside 10..300
    p = make_policy("pollux", micro_batch_size=10, bounds=(10, 300), every=2)
    assert p.decide(_stats(0, 10, 2, grad_var=400.0), _context()) == 20  # not a decision step
    assert p.decide(_stats(1, 10, 2, grad_var=400.0), _context()) == 200
    # hysteresis: 90 is within 5 % of the optimum's goodput, so it stays
    p = make_policy("pollux", micro_batch_size=10, bounds=None, every=1, min_gain="1.05")
    assert p.decide(_stats(0, 10, 9), _context()) == 90
    assert p.decide(_stats(1, 10, 30), _context()) == 100  # 300 is far worse


def test_shoal_scales_the_noise_and_limits_growth_by_hand():
    p = make_policy("shoal", micro_batch_size=10, bounds=None, every=1, critical_scale=4)
    # phi = 4 x 100 = 400: B* = 200, but at most 2x the current 60 per decision
    assert p.decide(_stats(0, 10, 6), _context()) == 120
    assert p.decide(_stats(1, 10, 12), _context()) == 200
    assert p.decide(_stats(2, 10, 19), _context()) == 190  # 200 gains < 5 % over 190: stay


def test_schedule_by_step_and_by_loss():
    p = make_policy("schedule", micro_batch_size=32, bounds=None, ramp="32@0,64@3,128@6")
    ctx = _context(b=32, bounds=(32, 4096), b0=32)
    assert [p.decide(_stats(s, 32, 1), ctx) for s in (0, 1, 2, 4, 5, 9)] == [
        32, 32, 64, 64, 128, 128,
    ]  # fmt: skip
    p = make_policy(
        "schedule", micro_batch_size=32, bounds=None, ramp_loss="32@inf,64@1.0,128@0.5",
        loss_smoothing=0,
    )  # fmt: skip
    losses = [2.0, 0.9, 1.5, 0.4, 3.0]
    assert [p.decide(_stats(i, 32, 1, loss=x), ctx) for i, x in enumerate(losses)] == [
        32, 64, 64, 128, 128,
    ]  # fmt: skip


def test_lr_scaling_rules_by_hand():
    ctx = _context(b0=10)
    for rule, want in (("none", 1.0), ("linear", 10.0), ("sqrt", math.sqrt(10))):
        p = make_policy("fixed", micro_batch_size=10, bounds=None, lr_scaling=rule)
        assert p.lr_factor(100, ctx) == pytest.approx(want)
    p = make_policy("pollux", micro_batch_size=10, bounds=None, every=1, lr_scaling="adascale")
    assert p.lr_factor(100, ctx) == 1.0  # nothing measured yet
    p.decide(_stats(0, 10, 2), ctx)
    # sigma^2 per B0 = 100 / 10 = 10, S = 10: r = (10 + 1) / (10 / 10 + 1) = 5.5
    assert p.lr_factor(100, ctx) == pytest.approx(5.5)
    assert p.state_dict()["lr_factor"] == pytest.approx(5.5)


@pytest.mark.parametrize(
    "name,params",
    [
        ("jabas", {"gamma": 0.3, "alpha": 0.2}),
        ("pollux", {}),
        ("shoal", {"critical_scale": 2.0}),
        ("schedule", {"ramp_loss": "10@inf,40@2.0,80@1.0"}),
    ],
)
def test_state_round_trip_gives_identical_later_decisions(name, params):
    def stream(i):
        m = 2 + (i * 7) % 9
        return _stats(i, 10, m, 0.4 * math.sin(i), 3.0 / (1 + i), 1 + i / 10, 50 + 13 * (i % 5))

    ctx = _context()
    a = make_policy(name, micro_batch_size=10, bounds=(10, 500), every=3, **params)
    for i in range(12):
        a.decide(stream(i), ctx)
    b = make_policy(name, micro_batch_size=10, bounds=(10, 500), every=3, **params)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    later = [(a.decide(stream(i), ctx), b.decide(stream(i), ctx)) for i in range(12, 40)]
    assert all(x == y for x, y in later)
    assert a.state_dict() == b.state_dict()


@pytest.mark.parametrize(
    "args,needle",
    [
        (("nope", 8, (8, 64), {}), "unknown batch policy"),
        (("jabas", 8, (12, 64), {}), "not positive multiples"),
        (("jabas", 8, (128, 64), {}), "lower bound is above"),
        (("jabas", 8, None, {"gamma": 1.0}), "outside (-1, 1)"),
        (("jabas", 8, None, {"gamma": "-1.5"}), "outside (-1, 1)"),
        (("jabas", 8, None, {"beta": 1}), "unknown option 'beta'"),
        (("pollux", 8, None, {"candidates": "many"}), "is not a int"),
        (("schedule", 8, None, {}), "exactly one of"),
        (("schedule", 8, None, {"ramp": "8@0,12@5"}), "not a multiple"),
        (("schedule", 8, None, {"ramp": "8@5,16@0"}), "increasing steps"),
        (("schedule", 8, None, {"ramp_loss": "8@1,16@2"}), "decreasing losses"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    name, b, bounds, params = args
    with pytest.raises(UserError) as err:
        make_policy(name, micro_batch_size=b, bounds=bounds, **params)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_parse_bounds_and_lr_scaling():
    assert parse_bounds("64:2048") == (64, 2048)
    for bad in ("64", "a:b", "0:8", "1:2:3"):
        with pytest.raises(UserError):
            parse_bounds(bad)
    with pytest.raises(UserError, match="unknown lr scaling"):
        make_policy("fixed", micro_batch_size=8, bounds=None, lr_scaling="cubic")
