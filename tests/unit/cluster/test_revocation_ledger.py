"""Revocation models and per-second billing."""

import math
import random

import pytest

from shoal.cluster.ledger import Carried, CostLedger
from shoal.cluster.revocation import (
    BathtubLifetimes,
    load_bamboo_trace,
    load_gce_lifetimes,
    revocation_model,
)
from shoal.errors import UserError


def test_gce_lifetimes_match_the_measured_table():
    model = load_gce_lifetimes()
    assert len(model.lifetimes_s["k80"]) == 64
    assert len(model.lifetimes_s["p100"]) == 40
    # the digest's count: 5 of 64 K80 VMs were revoked within the first hour
    assert model.revoked_fraction_within("k80", 3600) == pytest.approx(5 / 64)


def test_empirical_sampling_is_seeded_and_caps_at_24h():
    model = load_gce_lifetimes()

    def draws(seed, n=200):
        rng = random.Random(seed)  # one generator for all n draws
        return [model.sample_lifetime_s("k80", rng) for _ in range(n)]

    a = draws(3)
    assert a == draws(3)  # same seed, same samples
    assert a != draws(4)  # another seed, other samples
    # the draws vary: some survive to the cap (inf), and the rest, each jittered within its
    # measured minute, are all different and below the 24 h cap
    finite_a = [d for d in a if math.isfinite(d)]
    assert math.inf in a and len(set(finite_a)) == len(finite_a) > 20
    assert all(0 <= d < 24 * 3600 for d in finite_a)
    many = draws(0, 4000)
    finite = [d for d in many if math.isfinite(d)]
    assert all(0 <= d < 24 * 3600 for d in finite)
    # about 17 of 64 K80s died before the cap
    assert abs(len(finite) / len(many) - 17 / 64) < 0.03


def test_bathtub_cdf_is_monotone_and_sampling_inverts_it():
    model = BathtubLifetimes()
    values = [model.cdf(h * 3600) for h in range(25)]
    assert values == sorted(values) and values[0] == 0.0
    rng = random.Random(1)
    draws = [model.sample_lifetime_s("k80", rng) for _ in range(3000)]
    empirical = sum(d <= 3 * 3600 for d in draws) / len(draws)
    assert abs(empirical - model.cdf(3 * 3600)) < 0.03


def test_bamboo_trace_lifetimes_are_positive():
    trace = load_bamboo_trace("p3")
    finite = [t for t in trace.lifetimes_s if math.isfinite(t)]
    assert finite and all(t > 0 for t in finite)


def test_unknown_revocation_model_is_a_user_error():
    with pytest.raises(UserError, match="unknown revocation model"):
        revocation_model("weekly")


def test_ledger_bills_per_second_and_stops_at_revocation():
    ledger = CostLedger()
    ledger.open("spot-0", "job-a", 0.256, 0.0)
    ledger.open("ps", "job-a", 0.143, 0.0)
    ledger.close("spot-0", 1800.0)  # revoked after half an hour
    ledger.close("ps", 3600.0)
    assert ledger.usd_by_account["job-a"] == pytest.approx(0.128 + 0.143)
    with pytest.raises(KeyError):
        ledger.close("spot-0", 4000.0)
    assert not ledger.is_open("spot-0")
    ledger.open("x", "b", 1.0, 10.0)
    assert ledger.is_open("x")
    with pytest.raises(ValueError):
        ledger.open("x", "b", 1.0, 10.0)
    with pytest.raises(ValueError, match="closed before it was opened"):
        ledger.close("x", 9.0)
    # a negative price or time is refused on its own; a free server is billed nothing
    for price, t in [(-0.1, 0.0), (1.0, -1.0)]:
        with pytest.raises(ValueError, match="must be >= 0"):
            ledger.open("y", "b", price, t)
    ledger.open("free", "b", 0.0, 5.0)
    ledger.open("brief", "b", 3.0, 7.0)
    assert ledger.close("free", 3605.0) == 0.0 and ledger.close("brief", 7.0) == 0.0
    # charges computed elsewhere add to their account; the total is every account's
    ledger.charge("c", 0.5)
    ledger.charge("c", 0.25)
    assert ledger.usd_by_account["c"] == 0.75
    assert ledger.total_usd == pytest.approx(0.128 + 0.143 + 0.75)


def _lease(action, server, t_s, usd=None, cause=None, device="k80", tier="spot", price=0.36):
    return {"action": action, "server": server, "device": device, "tier": tier,
            "usd_per_hour": price, "t_s": t_s, "usd": usd, "cause": cause}  # fmt: skip


def test_carry_over_continues_an_earlier_attempts_ledger():
    """A resumed run's ledger: closed leases at what they were billed, a lease its launcher
    never closed billed to the last time seen (once), revocations counted, numbering after
    the highest server number, the clock from the last time."""
    from shoal.cluster.ledger import carry_over

    leases = [
        _lease("open", "k80-spot-0", 0.0),
        _lease("open", "p100-od-1", 0.0, device="p100", tier="on_demand", price=1.46),
        _lease("close", "k80-spot-0", 3600.0, usd=0.36, cause="revoked"),
        _lease("open", "k80-spot-2", 3600.0),
    ]
    carried = carry_over(leases, [7200.0])
    assert carried.end_s == 7200.0 and carried.servers == 3 and carried.revocations == 1
    assert carried.usd_by_kind == pytest.approx({"k80": 0.36 + 0.36, "p100": 2 * 1.46})
    assert carried.usd_by_tier == pytest.approx({"spot": 0.72, "on_demand": 2.92})
    assert carried.usd == pytest.approx(0.72 + 2.92)
    assert [(x["server"], round(usd, 6)) for x, usd in carried.unclosed] == [
        ("p100-od-1", 2.92), ("k80-spot-2", 0.36)
    ]  # fmt: skip
    # nothing carried is what a fresh run starts from: clock at 0, servers numbered from 0
    assert carry_over([], []) == Carried() and Carried().end_s == 0.0 == Carried().servers
    assert carry_over([], []).usd == 0.0


def test_carry_over_numbers_after_the_highest_server_and_bills_an_open_lease_from_its_open():
    from shoal.cluster.ledger import carry_over

    leases = [_lease("open", "k80-spot-7", 100.0), _lease("open", "spare", 0.0, price=3.6)]
    carried = carry_over(leases, [100.0])
    assert carried.servers == 8  # after k80-spot-7, not the 2 leases seen
    # the lease opened at the last time seen costs nothing; the other its 100 s
    assert [round(usd, 9) for _, usd in carried.unclosed] == [0.0, 0.1]
    assert carry_over([_lease("open", "a", 0.0), _lease("open", "b", 0.0)], []).servers == 2
