"""What the live savings bench (bench/spot_savings.py) exposed in the pure layer: a live run's
--workers are ready at the start, a notice shorter than the rest of a step loses that step, and
the scaler does not move off a held mix that meets its goal for a near-tie."""

import pytest

from shoal.cluster.provider import Offer
from shoal.control.mix_model import ScalerInput
from shoal.control.scaler import Goal, Scaler
from shoal.errors import UserError
from shoal.sim.replay import simulate
from shoal.sim.scenario import Scenario


def fixed(tmp_path, lifetime=None, notice_s=30.0, **extra):
    prov = {"kinds": "k80", "seed": 0, "startup_s": 60.0, "notice_s": notice_s}
    if lifetime is not None:
        (tmp_path / "life.csv").write_text(f"k80,{lifetime}\n")
        prov["spot_trace"] = str(tmp_path / "life.csv")
    fields = dict(
        steps=100, micro_batch_size=32, batch=((0, 64),), host_s=1.0, slowdowns={"k80": 2.0},
        step_overhead_s=0.5, change_cost_s=5.0, provider=prov, goal={}, autoscale=False,
        initial={"k80:on_demand": 2},
    )  # fmt: skip
    return Scenario(**{**fields, **extra})


def test_initial_servers_ready_at_the_start(tmp_path):
    booted = simulate(fixed(tmp_path))
    ready = simulate(fixed(tmp_path, initial_ready=True))
    assert booted.time_s == pytest.approx(60 + 5 + 100 * 2.5)  # start-up, then one change
    assert ready.time_s == pytest.approx(100 * 2.5) and ready.changes == 0
    assert ready.cost_usd == pytest.approx(2 * 0.723 * 250 / 3600)


def test_a_notice_shorter_than_the_step_loses_it(tmp_path):
    # a spot K80 revoked mid-step: with a 30 s notice the 2.5 s step finishes, with 0.1 s not
    spot = {"initial": {"k80:on_demand": 1, "k80:spot": 1}, "initial_ready": True}
    long = simulate(fixed(tmp_path, lifetime=101.25, **spot))
    short = simulate(fixed(tmp_path, lifetime=101.25, notice_s=0.1, **spot))
    assert long.revocations >= 1 and long.lost_steps == 0
    assert short.revocations >= 1 and 0 < short.lost_steps < short.revocations


def test_the_scaler_keeps_a_held_mix_for_a_near_tie():
    def inp(held, overhead_s):
        offers = [Offer("k80", "spot", 0.256, 60.0, 30.0, 4)]
        return ScalerInput(
            now_s=0.0, steps_done=0, steps_total=3600, batch=((0, 1),),
            step_time=lambda gpus, b: 4.0 / sum(gpus.values()) + overhead_s,
            offers=offers, held=held, spent_usd=0.0, change_cost_s=5.0,
            revocations_per_s=lambda k: 0.0,
        )  # fmt: skip

    scaler = Scaler(Goal(deadline_s=20000), max_servers=4)
    one, two = {("k80", "spot"): 1}, {("k80", "spot"): 2}
    four = {("k80", "spot"): 4}
    # cost ~ 4 + n x overhead: with 0.01 s of overhead every n is within NEAR_BEST (5 %) of
    # the cheapest (one server): the fastest of them, not the cheapest by 0.75 %
    assert scaler.decide(inp({}, 0.01)).counts == four
    assert scaler.decide(inp(two, 0.01)).counts == two  # one is only 0.2 % cheaper: kept
    assert scaler.decide(inp(two, 0.15)).counts == two  # 3.5 % cheaper: still kept
    assert scaler.decide(inp(two, 0.3)).counts == one  # 7 % cheaper: moved


def test_the_replay_counts_the_join_delay_the_live_scaler_had_measured_by_then(tmp_path):
    """A live run's scaler counts --startup until its first join is measured, then the median
    of the delays so far; the replay's scaler counts the same at the same times, not the whole
    run's median from the start (which made it shy of replacements the live run bought)."""
    from shoal.sim.replay import _Run

    joins = ((1000.0, 900.0), (2000.0, 300.0), (3000.0, 600.0))
    sc = fixed(tmp_path, join_delay_s=600.0, join_delays=joins)
    assert Scenario.from_json(sc.to_json()) == sc  # the pairs survive the round trip
    run = _Run(sc)
    counted = []
    for t in (500.0, 1500.0, 2500.0, 3500.0):
        run.t = t
        counted.append(run.counted_delay())
    assert counted == [0.0, 900.0, 600.0, 600.0]  # none yet (--startup counts), then medians
    run.t = 1500.0
    assert {o.startup_s for o in run.scaler_input().offers} == {900.0}
    old = _Run(fixed(tmp_path, join_delay_s=600.0))  # a scenario without the pairs
    assert old.counted_delay() == 600.0
    with pytest.raises(UserError, match="join_delays must be .* delay_s >= 0"):
        fixed(tmp_path, join_delays=((1.0, -2.0),))


@pytest.mark.parametrize(
    ("notice_s", "progress", "busy_until"), [(1.0, 40, 101.25 + 5.0), (30.0, 40.1, 100.25 + 5.0)]
)
def test_a_notice_too_short_for_the_step_holds_the_survivors_until_the_kill(
    tmp_path, notice_s, progress, busy_until
):
    """Live, a member noticed with less time than the rest of its step is killed at the
    notice's deadline, and the survivors compute the doomed step until then: their collective
    fails only at the kill. A notice long enough lets it leave at the boundary, losing nothing.
    (The replay let the survivors train from the notice: 30 s of every such notice at the spot
    bench's time scale, which made it 0.2-2.5 points more optimistic than the live runs.)"""
    from shoal.sim.replay import _Run

    run = _Run(fixed(tmp_path, lifetime=1000.0, notice_s=notice_s))
    for tier in ("on_demand", "spot"):
        run.acquire("k80", tier, ready_now=True)
    spot = next(name for name, s in run.servers.items() if s.lease.tier == "spot")
    run.t, run.progress = 100.25, 40.1  # 0.9 of a 2.5 s step left: 2.25 s
    run.on_leave(spot)
    assert run.progress == pytest.approx(progress)
    assert run.busy_until == pytest.approx(busy_until)  # then the change's 5 s
