"""The replay executes a target mix make-before-break, as the live driver does
(`launcher/autoscale.py`, `_fill` and `_shrink`): the missing servers are requested at once, a
surplus server still booting is released at once, and the surplus members leave only once
every staying server has joined, never the last member. Until they leave they are held, billed
and training. (The replay released every surplus server at the decision, so a change of kind
stopped training until the new servers had booted.)

K80s at 2 s per micro-batch, V100s at 1 s, 2 micro-batches per step and 0.5 s of overhead:
2.5 s per step on two K80s, 4.5 s on one, 1.5 s on two V100s; start-up 60 s, a change 5 s.
The scaler is a stand-in that switches the target at a given time, so each test sets the
target it exercises.
"""

import math

import pytest

from shoal.control.mix_model import Mix, MixModel
from shoal.control.scaler import Goal, Scaler
from shoal.sim import replay as replay_mod
from shoal.sim.replay import simulate
from shoal.sim.scenario import Scenario

K80, V100 = ("k80", "on_demand"), ("v100", "on_demand")


def switching(monkeypatch, *targets: tuple[float, dict]) -> None:
    """The replay's scaler wants, at each decision, the last of `targets` (from, mix) begun."""

    class Switching(Scaler):
        def decide(self, inp):
            counts = [mix for at_s, mix in targets if at_s <= inp.now_s][-1]
            return Mix(counts, 1.0, 0.0, 0.0)

    monkeypatch.setattr(replay_mod, "Scaler", Switching)


def run(max_servers=4, quota=None, initial=None, scale_every_s=100.0):
    provider = {"kinds": "k80,v100", "seed": 0, "startup_s": 60.0, "notice_s": 30.0}
    return simulate(
        Scenario(
            steps=100, micro_batch_size=32, batch=((0, 64),), host_s=1.0,
            slowdowns={"k80": 2.0, "v100": 1.0}, step_overhead_s=0.5, change_cost_s=5.0,
            provider={**provider, "quota": quota}, goal={"deadline_s": 100000.0},
            max_servers=max_servers, scale_every_s=scale_every_s, autoscale=True,
            initial=initial or {"k80:on_demand": 2}, initial_ready=True,
        )
    )  # fmt: skip


def closes(result) -> list[tuple[float, str, str]]:
    """(time, kind, cause) of every close, in time order."""
    kinds = {e["server"]: e["kind"] for e in result.events if e["event"] == "request"}
    out = [e for e in result.events if e["event"] == "close"]
    return sorted((e["t_s"], kinds[e["server"]], e["cause"]) for e in out)


def test_a_change_of_kind_keeps_the_old_servers_until_the_new_ones_have_joined(monkeypatch):
    # two K80s train from 0; at the tick of 100 s the target is two V100s, ready at 160: the
    # K80s train on (40 -> 64 steps) and are billed until then, leave once the V100s have
    # joined (two changes, 5 s each: the join, then the leave, as live), and the V100s do the
    # last 36 steps at 1.5 s: the end at 224 s. (Released at once, nothing trained from 100 to
    # 165: the end at 255 s.)
    switching(monkeypatch, (0.0, {K80: 2}), (100.0, {V100: 2}))
    result = run()
    assert result.time_s == pytest.approx(170 + 36 * 1.5)
    assert result.changes == 2
    assert closes(result) == [
        (160.0, "k80", "released"), (160.0, "k80", "released"),
        (pytest.approx(224.0), "v100", "end"), (pytest.approx(224.0), "v100", "end"),
    ]  # fmt: skip
    k80_usd = 2 * 0.723 * 160 / 3600
    assert result.cost_by_kind["k80"] == pytest.approx(k80_usd)


def test_under_max_servers_a_change_of_kind_goes_one_server_at_a_time(monkeypatch):
    # at the bound (2) the V100 cannot be bought before a K80 leaves: one K80 leaves at 100 (a
    # member stays), its slot buys a V100 (joins 160), and only then the second K80 leaves and
    # the second V100 is bought (joins 220), as the live driver's polls do
    switching(monkeypatch, (0.0, {K80: 2}), (100.0, {V100: 2}))
    result = run(max_servers=2)
    requests = [(e["t_s"], e["kind"]) for e in result.events if e["event"] == "request"]
    assert requests == [(0.0, "k80"), (0.0, "k80"), (100.0, "v100"), (160.0, "v100")]
    assert closes(result)[:2] == [(100.0, "k80", "released"), (160.0, "k80", "released")]
    joins = [e["t_s"] for e in result.events if e["event"] == "join"]
    assert joins == [160.0, 220.0]


def test_a_surplus_server_still_booting_is_released_at_once(monkeypatch):
    # the start wants a V100 beside the K80 (it boots until 60 s); the tick at 30 s no longer
    # does: the V100 goes at 30 s, never joins, and the K80 trained throughout
    switching(monkeypatch, (0.0, {K80: 1, V100: 1}), (30.0, {K80: 1}))
    result = run(initial={"k80:on_demand": 1}, scale_every_s=30.0)
    assert closes(result)[0] == (30.0, "v100", "released")
    assert not any(e["event"] == "join" for e in result.events)
    assert result.time_s == pytest.approx(100 * 4.5) and result.changes == 0


def test_the_last_member_is_never_released(monkeypatch):
    # the target is a V100 that cannot be had (quota 0): nothing boots, so the surplus K80s
    # leave, but the last one stays and trains the run alone (one change, at 0 s)
    switching(monkeypatch, (0.0, {V100: 1}))
    result = run(quota={"v100:on_demand": 0})
    assert closes(result) == [(0.0, "k80", "released"), (pytest.approx(455.0), "k80", "end")]
    assert result.time_s == pytest.approx(5 + 100 * 4.5)
    assert any(e["event"] == "no_capacity" for e in result.events)


def test_a_later_decision_keeps_the_surplus_it_wants_again(monkeypatch):
    # at 100 s the target moves to two V100s (booting until 160 s); at 150 s it is two K80s
    # again: the booting V100s are released, the K80s never stopped and stay to the end
    switching(monkeypatch, (0.0, {K80: 2}), (100.0, {V100: 2}), (150.0, {K80: 2}))
    result = run(scale_every_s=50.0)
    assert closes(result)[:2] == [(150.0, "v100", "released"), (150.0, "v100", "released")]
    assert result.time_s == pytest.approx(100 * 2.5) and result.changes == 0


@pytest.mark.parametrize(("max_servers", "changes"), [(4, 2), (2, 4)])
def test_the_scalers_prediction_of_a_change_of_kind_is_what_the_replay_executes(
    monkeypatch, max_servers, changes
):
    """The scaler judges a move as the drivers execute it: at 100 s, the model's finish and
    cost of two V100s (held: two ready K80s) are the replay's, membership changes included.
    Under the bound two: the V100s join at 160 s, then the K80s leave. At the bound (2) four:
    a K80 leaves at 100 s; a V100 joins at 160 s and the other K80 leaves; the last V100 joins
    at 220 s (the move waits two boots, trained on one K80, then on one V100), each change
    pausing whoever trains then. (The replay coalesced a join with the leaves it let go, the
    model counted two changes for any move, and live makes one per join and per leave.)"""
    seen = []

    class Watching(Scaler):
        def decide(self, inp):
            seen.append(inp)
            return Mix({K80: 2} if inp.now_s < 100 else {V100: 2}, 1.0, 0.0, 0.0)

    monkeypatch.setattr(replay_mod, "Scaler", Watching)
    result = run(max_servers=max_servers, scale_every_s=25.0)
    assert result.changes == changes
    joins = [e["t_s"] for e in result.events if e["event"] == "join"]
    assert joins == ([160.0, 160.0] if max_servers == 4 else [160.0, 220.0])
    inp = next(i for i in seen if i.now_s == 100.0)
    model = MixModel(inp, max_servers)
    finish_s, cost_usd, _ = model.predict(tuple(2 if k == V100 else 0 for k in model.keys))
    assert finish_s == pytest.approx(result.time_s)
    assert cost_usd == pytest.approx(result.cost_usd)
    # at the bound: 40 steps by 100 s; one K80 (4.5 s a step) 105-160, one V100 (2.5 s)
    # 170-220, both V100s (1.5 s) from 225: 225 + (60 - 55 / 4.5 - 50 / 2.5) x 1.5
    at_bound = 225 + (60 - 55 / 4.5 - 50 / 2.5) * 1.5
    assert result.time_s == pytest.approx(170 + 36 * 1.5 if max_servers == 4 else at_bound)
    booting = next(i for i in seen if 100.0 < i.now_s < 160.0)  # a decision while one boots
    assert dict(booting.booting) == {V100: 2 if max_servers == 4 else 1}
    assert booting.boot_left_s == pytest.approx(160.0 - booting.now_s)


MOVES = [  # (K80s held, V100s wanted, K80s kept, max_servers): every reachable move of the grid
    (held, wanted, kept, bound)
    for held in (2, 3)
    for wanted in (1, 2, 3)
    for kept in (0, 1)
    for bound in range(max(held, wanted + kept), held + wanted + 2)
]


@pytest.mark.parametrize(("held", "wanted", "kept", "bound"), MOVES)
def test_the_model_predicts_every_move_as_the_replay_executes_it(
    monkeypatch, held, wanted, kept, bound
):
    """From `held` ready K80s (40 steps done at 100 s, at 2.5 s a step on 2 or 3 of them) to
    `wanted` V100s beside `kept` K80s, under `max_servers` = `bound`: the model's finish and
    cost at 100 s are the replay's to the float, whatever the boots, swaps and membership
    changes the move needs (41 of these 43 differed before the two counted changes alike)."""
    seen = []
    target = {V100: wanted} | ({K80: kept} if kept else {})

    class Watching(Scaler):
        def decide(self, inp):
            seen.append(inp)
            return Mix({K80: held} if inp.now_s < 100 else target, 1.0, 0.0, 0.0)

    monkeypatch.setattr(replay_mod, "Scaler", Watching)
    result = run(max_servers=bound, scale_every_s=25.0, initial={"k80:on_demand": held})
    inp = next(i for i in seen if i.now_s == 100.0)
    assert inp.steps_done == 40 and not inp.booting
    model = MixModel(inp, bound)
    counts = tuple({V100: wanted, K80: kept}.get(k, 0) for k in model.keys)
    finish_s, cost_usd, _ = model.predict(counts)
    assert finish_s == pytest.approx(result.time_s, abs=1e-9)
    assert cost_usd == pytest.approx(result.cost_usd, abs=1e-12)


def test_a_mix_the_drivers_cannot_reach_is_never_chosen():
    """At --max-servers 1 a change of kind never happens (the last member is never released
    to make room): the model gives such a mix no finish, so the scaler keeps the held one."""
    from shoal.cluster.provider import Offer
    from shoal.control.mix_model import ScalerInput

    inp = ScalerInput(
        now_s=0.0, steps_done=0, steps_total=100, batch=((0, 64),),
        step_time=lambda gpus, b: 2.0 if "k80" in gpus else 1.0,
        offers=[Offer("k80", "on_demand", 0.723, 60.0, None, 1),
                Offer("v100", "on_demand", 2.144, 60.0, None, 1)],
        held={K80: 1}, spent_usd=0.0, change_cost_s=5.0, revocations_per_s=lambda k: 0.0,
    )  # fmt: skip
    model = MixModel(inp, 1)
    v100_only = tuple(int(k == V100) for k in model.keys)
    assert model.predict(v100_only)[:2] == (math.inf, math.inf)
    assert Scaler(Goal(budget_usd=100.0), max_servers=1).decide(inp).counts == {K80: 1}
    assert MixModel(inp, 2).predict(v100_only)[0] == pytest.approx(60 + 100 * 1.0 * 0.7 + 10)
