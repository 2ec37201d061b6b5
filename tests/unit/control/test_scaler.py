"""The scaler on hand-made inputs whose answers are worked out by hand below.

The step time is `batch / speed`, speed 1 per K80 and 2 per V100, batch 1: one K80 does a step
a second. With nothing held, a mix first waits the 60 s start-up, then one membership change of
5 s (the joins). A spot K80 is revoked at 1e-4 per second; each revocation costs its leave and
its replacement's join (2 x 5 s), no step (30 s notice), and the replacement's 60 s start-up at
the mix's speed without it (alone: all of it), so lam = 1e-4 x 70 = 0.007.
"""

import math
from collections import Counter

import pytest

from shoal.cluster.provider import Offer
from shoal.cluster.revocation import NoRevocations, TraceRevocations
from shoal.control import scaler as scaler_mod
from shoal.control.mix_model import (
    MixModel,
    ScalerInput,
    batch_at,
    boot_left,
    profile_step_time,
    remaining_batches,
    revocation_rate,
)
from shoal.control.scaler import Goal, Scaler, check_goal
from shoal.errors import UserError

PRICE = {("k80", "on_demand"): 0.723, ("k80", "spot"): 0.256}
PRICE |= {("v100", "on_demand"): 2.144, ("v100", "spot"): 0.861}
SPEED = {"k80": 1.0, "v100": 2.0}


def offer(kind, tier, quota=1):
    notice = 30.0 if tier == "spot" else None
    return Offer(kind, tier, PRICE[(kind, tier)], 60.0, notice, quota)


def step_time(gpus, batch):
    return batch / sum(SPEED[k] * n for k, n in gpus.items())


def make_input(offers, steps=3600, held=None, **extra):
    fields = dict(
        now_s=0.0,
        steps_done=0,
        steps_total=steps,
        batch=((0, 1),),
        step_time=step_time,
        offers=offers,
        held=held or {},
        spent_usd=0.0,
        change_cost_s=5.0,
        revocations_per_s=lambda kind: 1e-4,
    )
    return ScalerInput(**{**fields, **extra})


K80_BOTH = [offer("k80", "on_demand"), offer("k80", "spot")]
SPOT_FINISH = 3600 / (1 - 0.007) + 65  # 3690.4 s
OD_FINISH = 3600 + 65.0


def test_spot_when_the_deadline_slack_covers_revocations():
    mix = Scaler(Goal(deadline_s=4000), max_servers=1).decide(make_input(K80_BOTH))
    assert mix.counts == {("k80", "spot"): 1}
    assert mix.finish_s == pytest.approx(SPOT_FINISH)
    assert mix.cost_usd == pytest.approx(0.256 * SPOT_FINISH / 3600)
    assert mix.step_s == 1.0


def test_on_demand_when_the_deadline_is_tight():
    # spot would finish at 3690 s, past 3680; on-demand at 3665 s (never revoked)
    mix = Scaler(Goal(deadline_s=3680), max_servers=1).decide(make_input(K80_BOTH))
    assert mix.counts == {("k80", "on_demand"): 1}
    assert mix.finish_s == pytest.approx(OD_FINISH)
    assert mix.cost_usd == pytest.approx(0.723 * OD_FINISH / 3600)


def test_more_servers_when_one_cannot_make_it():
    # one K80 needs 3665 s; two spot K80s: 1800 s of steps, and a revocation now leaves the
    # other at half speed during the 60 s start-up: loss = 10 + 30, lam = 2 x 1e-4 x 40
    mix = Scaler(Goal(deadline_s=2000), max_servers=2).decide(
        make_input([offer("k80", "on_demand", 2), offer("k80", "spot", 2)])
    )
    assert mix.counts == {("k80", "spot"): 2}
    assert mix.finish_s == pytest.approx(1800 / (1 - 2e-4 * 40) + 65)


def test_a_kind_out_of_capacity_falls_back_to_another_kind():
    # K80 spot has no capacity (its offer is gone); V100 spot beats K80 on-demand on price:
    # 1 V100 spot takes 1800 s at 0.861/h = 0.43 USD, 1 K80 on-demand 3665 s at 0.723/h = 0.74
    offers = [offer("k80", "on_demand"), offer("v100", "spot")]
    mix = Scaler(Goal(deadline_s=4000), max_servers=1).decide(make_input(offers))
    assert mix.counts == {("v100", "spot"): 1}
    only_od = Scaler(Goal(deadline_s=4000), max_servers=1).decide(make_input(offers[:1]))
    assert only_od.counts == {("k80", "on_demand"): 1}


def test_keeping_the_held_mix_costs_no_change():
    held = {("k80", "on_demand"): 1}
    inp = make_input([offer("k80", "on_demand")], held=held, now_s=100.0, steps_done=600)
    mix = Scaler(Goal(deadline_s=4000), max_servers=1).decide(inp)
    assert mix.counts == held and mix.finish_s == pytest.approx(100.0 + 3000)


def predict(inp, counts, max_servers=2):
    """(finish_s, cost_usd) of `counts`, a count per key in the model's (sorted) key order."""
    return MixModel(inp, max_servers).predict(counts)[:2]


def test_a_held_server_still_booting_is_not_counted_ready():
    """A held K80 that boots 40 s more trains only after them and its join (5 s; it was
    counted ready at once)."""
    held = {("k80", "on_demand"): 1}
    inp = make_input([offer("k80", "on_demand")], held=held)
    assert predict(inp, (1,)) == pytest.approx((3600.0, 0.723))
    booting = make_input([offer("k80", "on_demand")], held=held, booting=held, boot_left_s=40.0)
    assert predict(booting, (1,)) == pytest.approx((3645.0, 0.723 * 3645 / 3600))


def test_a_change_of_kind_trains_on_the_held_servers_while_the_new_ones_boot():
    """Make-before-break, as both drivers execute it: the held K80 trains through the V100's
    60 s start-up (1/60 of the 3600 steps) and both are billed; then the V100 does the rest at 2
    steps a second after the two changes (the K80's leave, the V100's join). The model waited
    the start-up with nothing trained and billed only the V100."""
    offers = [offer("k80", "on_demand"), offer("v100", "on_demand")]
    inp = make_input(offers, held={("k80", "on_demand"): 1})
    after = 1800 * (1 - 60 / 3600) + 2 * 5.0
    finish, cost = predict(inp, (0, 1))
    assert finish == pytest.approx(60 + after)
    assert cost == pytest.approx(((0.723 + 2.144) * 60 + 2.144 * after) / 3600)


def test_servers_that_would_join_after_the_end_are_not_worth_buying():
    """30 steps left on a ready K80: a V100 booting 60 s would never train, only be billed."""
    offers = [offer("k80", "on_demand"), offer("v100", "on_demand")]
    inp = make_input(offers, steps=30, held={("k80", "on_demand"): 1})
    assert predict(inp, (1, 1)) == pytest.approx((30.0, (0.723 + 2.144) * 30 / 3600))
    mix = Scaler(Goal(deadline_s=4000), max_servers=2).fastest(inp)
    assert mix.counts == {("k80", "on_demand"): 1}  # as fast, and cheaper


def test_a_held_server_is_kept_through_an_outage_of_its_offer():
    held = {("k80", "spot"): 1}  # K80 spot no longer offered: it can be kept, not grown
    inp = make_input([offer("k80", "on_demand")], held=held, revocations_per_s=lambda k: 0.0)
    mix = Scaler(Goal(deadline_s=4000), max_servers=2).decide(inp)
    assert mix.counts == {("k80", "spot"): 1}  # cheapest that meets the deadline


def test_a_goal_out_of_reach_is_the_rules_own_test():
    """`Goal.past_deadline` and `Goal.over_budget` (the live run's warnings and cost-line marks)
    are the rules the scaler decides by, with the same slack: a mix past the deadline is the
    fastest the deadline rule falls back to, one just within it (float slack) is not past."""
    assert Goal(deadline_s=3680).past_deadline(SPOT_FINISH)
    assert not Goal(deadline_s=3680).past_deadline(3680 * (1 + 1e-12))
    assert not Goal(budget_usd=0.1).past_deadline(math.inf)  # never under a budget
    assert not Goal(deadline_s=1).over_budget(math.inf)  # never under a deadline
    assert Goal(budget_usd=0.1).over_budget(0.11) and not Goal(budget_usd=0.1).over_budget(0.1)
    late = Scaler(Goal(deadline_s=1000), max_servers=1).decide(make_input(K80_BOTH))
    assert Goal(deadline_s=1000).past_deadline(late.finish_s)  # the fastest: 3665 s
    met = Scaler(Goal(deadline_s=4000), max_servers=1).decide(make_input(K80_BOTH))
    assert not Goal(deadline_s=4000).past_deadline(met.finish_s)


def test_minimise_time_under_a_budget():
    # budget 0.30 USD: one K80 spot (0.26) fits, two (2 x 0.256 x 1865 s = 0.265) fit and are
    # faster; V100 spot alone costs 0.43 > 0.30
    offers = [offer("k80", "spot", 2), offer("v100", "spot")]
    inp = make_input(offers, revocations_per_s=lambda k: 0.0)
    mix = Scaler(Goal(budget_usd=0.30), max_servers=3).decide(inp)
    assert mix.counts == {("k80", "spot"): 2}
    assert mix.finish_s == pytest.approx(1865.0)


def test_under_a_budget_the_cheapest_of_the_near_fastest_and_a_near_held_mix_is_kept():
    """NEAR_BEST under a budget: n spot K80s take 1 + 0.04 / n s a step, so every n finishes
    within 5 % of the fastest (four: 65 + 3636 s; one: 65 + 3744 s, 2.9 % later) and the
    cheapest of them, one, is taken, not the fastest; a held pair, as near, is kept."""

    def inp(held):
        return make_input(
            [offer("k80", "spot", 4)],
            held=held,
            step_time=lambda gpus, batch: 1.0 + 0.04 / sum(gpus.values()),
            revocations_per_s=lambda kind: 0.0,
        )

    scaler = Scaler(Goal(budget_usd=2.0), max_servers=4)
    assert scaler.fastest(inp({})).counts == {("k80", "spot"): 4}
    one = scaler.decide(inp({}))
    assert one.counts == {("k80", "spot"): 1}
    assert one.finish_s == pytest.approx(65 + 3744) and one.cost_usd < 0.3
    held = {("k80", "spot"): 2}
    assert scaler.decide(inp(held)).counts == held
    # a budget only one server fits: the fastest within it, whatever is held
    assert Scaler(Goal(budget_usd=0.5), max_servers=4).decide(inp(held)).counts == {
        ("k80", "spot"): 1
    }


def test_budget_below_one_step():
    # the cheapest step: one K80 spot, 1 s at 0.256 USD/h = 7.1e-5 USD
    with pytest.raises(UserError, match="below one step.*7.111e-05 USD, on 1 k80:spot"):
        check_goal(Goal(budget_usd=5e-5), make_input(K80_BOTH), max_servers=8)
    check_goal(Goal(budget_usd=1e-4), make_input(K80_BOTH), max_servers=8)


def test_impossible_deadline_names_the_fastest_finish_and_mix():
    with pytest.raises(UserError) as info:
        check_goal(Goal(deadline_s=1000), make_input(K80_BOTH), max_servers=1)
    assert str(info.value) == (
        "deadline 1000 s is impossible: the fastest feasible finish is 3665 s, on 1 k80:on_demand"
    )
    check_goal(Goal(deadline_s=3700), make_input(K80_BOTH), max_servers=1)
    # and decide() then returns that fastest mix
    mix = Scaler(Goal(deadline_s=1000), max_servers=1).decide(make_input(K80_BOTH))
    assert mix.counts == {("k80", "on_demand"): 1}


@pytest.mark.parametrize("servers", [0, 1001, 999999999])  # 999999999: gigabytes, a hang
def test_max_servers_bounds(servers):
    with pytest.raises(UserError, match="--max-servers"):
        Scaler(Goal(deadline_s=1000), max_servers=servers)


def test_max_servers_takes_its_bounds():
    for servers in (1, 1000):
        assert Scaler(Goal(deadline_s=1000), max_servers=servers).max_servers == servers


@pytest.mark.parametrize(
    "pieces, done, total",
    [(((0, 1),), 0, 10), (((0, 4), (3, 8), (7, 2)), 2, 12), (((0, 4), (3, 8)), 5, 6)],
)
def test_remaining_batches_count_per_piece(pieces, done, total):
    per_step = Counter(batch_at(pieces, s) for s in range(done, total))
    assert remaining_batches(pieces, done, total) == sorted(per_step.items())


def test_a_run_of_a_trillion_steps_decides_at_once():
    """The remaining steps were counted one by one at every decision: shoal run --steps 10^9
    --autoscale hung before any worker started."""
    inp = make_input(K80_BOTH, steps=10**12, batch=((0, 1), (10**11, 2)))
    mix = Scaler(Goal(budget_usd=10**9), max_servers=4).decide(inp)
    assert sum(mix.counts.values()) >= 1 and math.isfinite(mix.finish_s)


def test_goal_needs_exactly_one_positive_target():
    for bad in [{}, {"deadline_s": 1.0, "budget_usd": 1.0}, {"deadline_s": -5.0}]:
        with pytest.raises(UserError):
            Goal(**bad)
    for bad in [{"deadline_s": 0.0}, {"budget_usd": 0.0}, {"budget_usd": math.inf}]:
        with pytest.raises(UserError, match="must be a positive number"):
            Goal(**bad)


def test_the_end_line_names_the_goal_a_run_missed():
    assert Goal(budget_usd=0.5).missed_words(0.6, 10**6) == (", over the budget of $0.5000", "")
    assert Goal(budget_usd=0.5).missed_words(0.5, 10**6) == ("", "")
    late = "; ended at 4001 s, past the deadline of 4000 s"
    assert Goal(deadline_s=4000).missed_words(99.0, 4001.0) == ("", late)
    assert Goal(deadline_s=4000).missed_words(99.0, 4000.0) == ("", "")


def test_deterministic_and_the_local_search_finds_the_exact_answer(monkeypatch):
    offers = [offer(k, t, 3) for k in ("k80", "v100") for t in ("on_demand", "spot")]
    inp = make_input(offers, steps=20000)
    scaler = Scaler(Goal(deadline_s=4000), max_servers=6)
    exact = scaler.decide(inp)
    assert exact == scaler.decide(make_input(list(reversed(offers)), steps=20000))
    # four K80s (5000 steps in 1250 s) meet 1500 s cheapest; adding and removing servers alone
    # stop at three spot K80s and a V100 (either does worse there): moving one server from a
    # key to another (the V100 to a K80 on demand) reaches the answer
    offers2 = [offer("v100", "on_demand", 2), offer("k80", "on_demand", 2), offer("k80", "spot", 3)]
    inp2 = make_input(offers2, steps=5000)
    swap = Scaler(Goal(deadline_s=1500), max_servers=6)
    exact2 = swap.decide(inp2)
    assert exact2.counts == {("k80", "on_demand"): 1, ("k80", "spot"): 3}
    monkeypatch.setattr(scaler_mod, "EXACT_LIMIT", 0)
    assert scaler.decide(inp) == exact and swap.decide(inp2) == exact2
    assert sum(exact.counts.values()) > 1 and exact.finish_s <= 4000


def test_profile_step_time_is_the_shared_split():
    model = profile_step_time(32, 1.0, {"v100": 1.0, "k80": 2.0}, 0.5)
    # 8 micro-batches on a V100 (1 s each) and a K80 (2 s): 6 and 2 -> 6 s, + 0.5 s
    assert model({"v100": 1, "k80": 1}, 256) == 6.5
    assert model({"k80": 1}, 33) == 4.5 and model({}, 64) == float("inf")
    with pytest.raises(UserError, match="no slowdown for device kind 'p100'"):
        model({"p100": 1}, 64)


def test_revocation_rate():
    assert revocation_rate(NoRevocations(), "k80") == 0.0
    assert revocation_rate(TraceRevocations((100.0,)), "k80") == pytest.approx(0.01)
    # half revoked at 100 s, half never (exposure censored at 24 h): one revocation per
    # 100 + 86400 s of exposure, up to the sampling noise of the seeded draw
    rate = revocation_rate(TraceRevocations((100.0, float("inf"))), "k80")
    assert rate == pytest.approx(1 / 86500, rel=0.05)


def test_a_deadline_beyond_a_year_is_refused():
    """A scenario's replay runs to 10 x the deadline: 1e12 s looped ~17 min to its event guard."""
    Goal(deadline_s=365 * 86400.0)
    with pytest.raises(UserError, match="at most 365 days, got 1e\\+12 s"):
        Goal(deadline_s=1e12)
    with pytest.raises(UserError, match="at most 365 days"):
        Goal(deadline_s=365 * 86400.0 + 1)


def test_boot_left_is_the_last_servers_rest_and_never_negative():
    assert boot_left([100.0, 150.0], 300.0, 200.0) == 250.0  # ready at 400 and 450
    assert boot_left([100.0], 60.0, 200.0) == 0.0  # late: expected ready at 160
    assert boot_left([], 60.0, 0.0) == 0.0


def test_the_swaps_past_the_exact_ones_are_interpolated_closely(monkeypatch):
    """At the bound a change of kind of 40 K80s to V100s is 40 boots; past the first 16 the
    members' speed is taken on a line to the last one's, not evaluated (a decision at 1,000
    servers took 16 s): within 0.5 % of evaluating every one."""
    from shoal.control import mix_model

    offers = [offer("k80", "on_demand", quota=40), offer("v100", "on_demand", quota=40)]
    split = profile_step_time(1, 0.01, {"k80": 3.0, "v100": 1.0}, 0.0)  # 64 whole micro-batches
    inp = make_input(
        offers, steps=10**6, held={("k80", "on_demand"): 40}, batch=((0, 64),), step_time=split
    )
    v100s = (0, 40)
    interpolated = predict(inp, v100s, max_servers=40)
    monkeypatch.setattr(mix_model, "EXACT_BOOTS", 1000)
    exact = predict(inp, v100s, max_servers=40)
    assert interpolated != exact  # the line is not the exact speeds
    assert interpolated == pytest.approx(exact, rel=0.005)
    assert exact[0] > 40 * 60  # forty boots, one after another
