"""The scenario simulator: hand-timed runs, revocations with and without notice, every spot
server lost at once, capacity outages, the restart-from-checkpoint strategy, the ledger, and
`shoal simulate --scenario`.

The hand-timed runs use K80s at 2 s per micro-batch (host_s 1, slowdown 2), 2 micro-batches per
step and 0.5 s of overhead: 2.5 s per step on two K80s, 4.5 s on one; start-up 60 s, a
membership change 5 s.
"""

import json
import math
import re

import pytest

from shoal.cli import main
from shoal.errors import UserError
from shoal.sim import replay as replay_mod
from shoal.sim.replay import simulate
from shoal.sim.scenario import Scenario, step_time_model


def scenario(tmp_path=None, lifetime=None, provider=None, **extra):
    prov = {"kinds": "k80", "seed": 0, "startup_s": 60.0, "notice_s": 30.0}
    if lifetime is not None:
        (tmp_path / "life.csv").write_text(f"k80,{lifetime}\n")
        prov["spot_trace"] = str(tmp_path / "life.csv")
    fields = dict(
        steps=100,
        micro_batch_size=32,
        batch=((0, 64),),
        host_s=1.0,
        slowdowns={"k80": 2.0, "v100": 1.0},
        step_overhead_s=0.5,
        change_cost_s=5.0,
        provider={**prov, **(provider or {})},
        goal={"deadline_s": 100000.0},
        max_servers=4,
        scale_every_s=600.0,
        autoscale=False,
        initial={"k80:on_demand": 2},
    )
    return Scenario(**{**fields, **extra})


def test_step_time_model_is_the_shared_split():
    model = step_time_model(scenario())
    assert model({"k80": 2}, 64) == 2.5 and model({"k80": 1}, 64) == 4.5
    # 8 micro-batches on a V100 (1 s) and a K80 (2 s): 6 and 2 -> 6 s, + 0.5
    assert model({"v100": 1, "k80": 1}, 256) == 6.5
    assert model({"k80": 1, "v100": 0}, 33) == 4.5  # 33 samples: 2 micro-batches


def test_fixed_on_demand_run_by_hand():
    result = simulate(scenario())
    assert result.time_s == pytest.approx(60 + 5 + 100 * 2.5)
    assert result.cost_usd == pytest.approx(2 * 0.723 * 315 / 3600)
    assert result.cost_by_kind == {"k80": pytest.approx(result.cost_usd)}
    assert (result.revocations, result.changes, result.lost_steps) == (0, 1, 0.0)


def test_revocations_with_notice_by_hand(tmp_path):
    # spot revoked 100 s after it is ready, noticed 30 s before; replaced in kind each time:
    # join 60, leave 130 (26 steps), join 190 (+12.22 on one K80), leave 260 (+26), join 320
    # (+12.22), then 23.56 steps at 2.5 s: the end at 383.89 s
    sc = scenario(tmp_path, lifetime=100, initial={"k80:on_demand": 1, "k80:spot": 1})
    result = simulate(sc)
    end = 325 + (100 - 26 - 55 / 4.5 - 26 - 55 / 4.5) * 2.5
    assert result.time_s == pytest.approx(end)
    assert (result.revocations, result.changes, result.lost_steps) == (2, 5, 0.0)
    spot_s = 160 + (290 - 130) + (end - 260)  # each billed to its revocation, the last to the end
    assert result.cost_usd == pytest.approx((0.723 * end + 0.256 * spot_s) / 3600)


def test_without_notice_only_the_in_flight_step_is_lost(tmp_path):
    sc = scenario(
        tmp_path,
        lifetime=100,
        provider={"notice_s": None},
        initial={"k80:on_demand": 1, "k80:spot": 1},
    )
    result = simulate(sc)
    assert result.revocations >= 2
    assert 0 < result.lost_steps < result.revocations  # under one step per revocation


def test_a_server_revoked_while_it_boots_never_joins(tmp_path):
    # spot servers that die on arrival (noticed 30 s before): each is replaced, none joins, so
    # the run is the on-demand K80 alone: 60 + 5 + 100 x 4.5 s, one membership change
    sc = scenario(tmp_path, lifetime=0, initial={"k80:on_demand": 1, "k80:spot": 1})
    result = simulate(sc)
    assert result.time_s == pytest.approx(515.0)
    assert (result.changes, result.lost_steps) == (1, 0.0)
    assert result.revocations == 17  # noticed at 30, 60, ..., 510 s
    assert not any(e["event"] == "join" and "spot" in e["server"] for e in result.events)


def test_every_spot_server_revoked_at_once(tmp_path):
    # both revoked at 1060 s: 398 steps done, the checkpoint of t=600 s holds step 214; the
    # replacements join at 1120 s (5 s change) and do the 286 steps left before their own end
    no_notice = simulate(
        scenario(tmp_path, lifetime=1000, provider={"notice_s": None}, steps=500,
                 initial={"k80:spot": 2})
    )  # fmt: skip
    assert no_notice.lost_steps == pytest.approx(398 - 214)
    assert no_notice.time_s == pytest.approx(1125 + 286 * 2.5)
    events = [e["event"] for e in no_notice.events]
    assert "rollback" in events and no_notice.revocations == 2
    # with a notice the last worker checkpoints as it leaves: under one step lost
    noticed = simulate(scenario(tmp_path, lifetime=1000, steps=500, initial={"k80:spot": 2}))
    assert noticed.lost_steps < 1


def test_waits_for_capacity_and_resumes_from_the_checkpoint(tmp_path):
    # every spot K80 lost at 1060 s, none to be had until 2000 s, no on-demand at all: the tick
    # at 2400 s gets two, ready at 2460, joined by 2465, 286 steps from step 214 at 2.5 s
    sc = scenario(
        tmp_path,
        lifetime=1000,
        steps=500,
        initial={"k80:spot": 2},
        provider={
            "notice_s": None,
            "outages": [["k80", "spot", 1000, 2000]],
            "quota": {"k80:on_demand": 0},
        },
    )
    result = simulate(sc)
    assert result.time_s == pytest.approx(2465 + (500 - 214) * 2.5)
    assert result.lost_steps == pytest.approx(398 - 214)
    assert any(e["event"] == "no_capacity" for e in result.events)


def test_restart_from_checkpoint_loses_more_per_revocation(tmp_path):
    kw = dict(lifetime=100, initial={"k80:on_demand": 1, "k80:spot": 1}, steps=400)
    shoal = simulate(scenario(tmp_path, **kw))
    restart = simulate(scenario(tmp_path, restart_from_checkpoint=True, **kw))
    assert restart.revocations > 0 and shoal.revocations > 0
    assert restart.lost_steps / restart.revocations > shoal.lost_steps / shoal.revocations + 1
    assert restart.time_s > shoal.time_s
    assert any(e["event"] == "restart" for e in restart.events)


def test_ledger_total_equals_a_recomputation_from_the_events(tmp_path):
    sc = scenario(tmp_path, lifetime=100, initial={"k80:on_demand": 1, "k80:spot": 2}, steps=300)
    result = simulate(sc)
    opened = {e["server"]: e for e in result.events if e["event"] == "request"}
    usd = 0.0
    for e in result.events:
        if e["event"] == "close":
            start = opened.pop(e["server"])
            usd += start["usd_per_hour"] * (e["t_s"] - start["t_s"]) / 3600
    assert not opened and usd == pytest.approx(result.cost_usd, rel=1e-12)


def autoscaled(provider=None, **extra):
    fields = dict(steps=600, batch=((0, 64), (300, 128)), autoscale=True, initial={})
    fields["goal"] = {"deadline_s": 4 * 3600.0}
    return scenario(
        provider={"kinds": "k80,v100", "seed": 1, **(provider or {})}, **{**fields, **extra}
    )


def test_autoscaled_run_is_deterministic_and_cheaper_than_on_demand():
    result = simulate(autoscaled())
    assert result == simulate(autoscaled())
    on_demand_only = {f"{k}:spot": 0 for k in ("k80", "v100")}
    od = simulate(autoscaled(provider={"quota": on_demand_only}))
    assert result.time_s <= 4 * 3600 and od.time_s <= 4 * 3600
    assert result.cost_usd < 0.5 * od.cost_usd
    whys = {e["why"] for e in result.events if e["event"] == "decide"}
    assert {"start", "interval", "batch"} <= whys


def test_an_outage_steers_the_scaler_to_another_offer():
    outage = [["k80", "spot", 0, 1e9]]
    result = simulate(autoscaled(provider={"outages": outage}))
    tiers = {(e["kind"], e["tier"]) for e in result.events if e["event"] == "request"}
    assert tiers and ("k80", "spot") not in tiers


def test_an_impossible_goal_is_refused_before_the_run():
    with pytest.raises(UserError, match="deadline 600 s is impossible: the fastest feasible"):
        simulate(autoscaled(goal={"deadline_s": 600.0}))
    with pytest.raises(UserError, match="below one step"):
        simulate(autoscaled(goal={"budget_usd": 1e-6}))


def test_json_round_trip_and_bad_scenarios(tmp_path):
    sc = autoscaled()
    assert Scenario.from_json(json.loads(json.dumps(sc.to_json()))) == sc
    good = sc.to_json()
    for change, needle in [
        ({"stepz": 1}, "unknown field 'stepz'"),
        ({"steps": 0}, "steps must be >= 1"),
        ({"batch": [[5, 64]]}, "batch must start at step 0"),
        ({"batch": "x"}, "'batch' must be a list"),
        ({"goal": {"deadline_s": 1, "budget_usd": 1}}, "exactly one goal"),
        ({"provider": {"kinds": "h100"}}, "unknown device kind"),
        ({"autoscale": False, "initial": {}}, "needs initial"),
        ({"initial": {"k80:reserved": 1}}, "KIND:on_demand or KIND:spot"),
        # a traceback (TypeError: 'int' object is not iterable)
        ({"provider": {"kinds": "k80", "quota": 5}}, "quota must be \\[\\[kind, tier, n\\]"),
        # a string was taken as true
        ({"autoscale": "no"}, "autoscale must be true or false"),
        ({"restart_from_checkpoint": "no"}, "restart_from_checkpoint must be true or false"),
        # acquired one by one with initial_ready: gigabytes, a hang
        ({"initial": {"k80:spot": 999999999}}, "initial holds 999,999,999 servers, at most 1,000"),
        # a live run refuses --workers beyond --max-servers; the replay's fill stops there
        ({"initial": {"k80:spot": 5}}, "initial holds 5 servers, above max_servers 4"),
        # truncated silently: a batch of 1.9 was 1
        ({"batch": [[0, 1.9]]}, "'batch' steps and batch sizes must be integers"),
        ({"batch": [[0, 64], [300.5, 128]]}, "'batch' steps and batch sizes must be integers"),
        # a decision every 1e-9 s: 1 s of emulated time took 4.4 s, the run effectively hung
        ({"scale_every_s": 1e-9}, "scale_every_s must be >= 1 \\(emulated seconds\\), got 1e-09"),
    ]:
        with pytest.raises(UserError, match=needle):
            Scenario.from_json({**good, **change})
    with pytest.raises(UserError, match="missing field 'host_s'"):
        Scenario.from_json({k: v for k, v in good.items() if k != "host_s"})


def test_cli_scenario_with_too_many_servers(tmp_path, capsys):
    """max_servers 999,999,999: the scaler's count of mixes asked for gigabytes and hung."""
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({**autoscaled().to_json(), "max_servers": 999999999}))
    assert main(["simulate", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--max-servers 999999999: at most 1,000" in err and err.count("\n") == 1


def test_the_loop_guard_says_what_it_stopped(monkeypatch):
    """A re-decision every 1e-300 s ran 2,000,000 events (13 s) at t = 0, then said the run
    does not finish within 30 days (scale_every_s is now at least 1 s; a checkpoint every
    1e-300 s still meets the guard)."""
    monkeypatch.setattr(replay_mod, "MAX_EVENTS", 1000)
    with pytest.raises(UserError, match="1,000 events in .* s of emulated time, at step 0 of"):
        simulate(scenario(checkpoint_every_s=1e-300))


@pytest.mark.parametrize("every_s", [0.5, 1.0, 600.0])
def test_scale_every_bound_is_the_live_flags(every_s):
    """A live run writes its --scale-every into OUT/scenario.json: the flag and the scenario
    take the same values, so every live run's scenario loads."""
    from shoal.config import ProviderConfig

    def accepted(make) -> bool:
        try:
            make()
        except UserError:
            return False
        return True

    live = accepted(lambda: ProviderConfig(name="local", kinds="k80", scale_every_s=every_s))
    replay = accepted(lambda: scenario(scale_every_s=every_s))
    assert live == replay == (every_s >= 1)


def write_scenario(tmp_path, sc=None, **change):
    path = tmp_path / "scenario.json"
    data = (sc or autoscaled()).to_json()
    path.write_text(json.dumps({**data, **change}))
    return path


def one_line_error(capsys, path) -> str:
    assert main(["simulate", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "provider, needle",
    [
        ({"kinds": 5}, "provider: kinds must be a list of kind names"),  # was a TypeError
        ({"kinds": "k80", "spot_trace": ["a"]}, "provider: spot_trace must be a string or null"),
        ({"kinds": "k80", "seeed": 1}, "provider: unknown field 'seeed'"),  # was ignored
    ],
)
def test_cli_scenario_bad_provider_is_one_line_naming_the_file(tmp_path, capsys, provider, needle):
    path = write_scenario(tmp_path, provider=provider)
    assert f"--scenario {path}: {needle}" in one_line_error(capsys, path)


def test_cli_impossible_goal_names_the_file_and_a_short_number(tmp_path, capsys):
    """A 1e300 s micro-batch: the error named no file and printed a ~300-digit finish."""
    path = write_scenario(tmp_path, host_s=1e300)
    err = one_line_error(capsys, path)
    assert f"--scenario {path}: deadline 14400 s is impossible" in err
    assert re.search(r"finish is \d(\.\d+)?e\+30\d s, on ", err)
    assert len(err) - len(str(path)) < 150  # short however long the temporary folder's name


def test_cli_scenario(tmp_path, capsys):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario().to_json()))
    assert main(["simulate", "--scenario", str(path)]) == 0
    assert "time 315.0 s" in capsys.readouterr().out
    assert main(["simulate", "--scenario", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time_s"] == pytest.approx(315) and out["revocations"] == 0
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(scenario().to_json()).encode())  # a BOM
    assert main(["simulate", "--scenario", str(path)]) == 0
    assert "time 315.0 s" in capsys.readouterr().out
    path.write_text('{"steps": 3')
    assert main(["simulate", "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not JSON" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text, needle",
    [
        # a RecursionError traceback
        ("[" * 100_000 + "]" * 100_000, "not JSON (nested too deeply)"),
        # Python's own refusal, naming no file and sys.set_int_max_str_digits
        ('{"steps": ' + "9" * 5000 + "}", "not JSON (an integer of 5,000 digits, too large"),
        # no float holds 10^400: an OverflowError traceback where it was used as a number
        ('{"host_s": 1' + "0" * 400 + "}", "not JSON (an integer of 401 digits, too large"),
    ],
)
def test_cli_scenario_json_that_cannot_be_read_is_one_line(tmp_path, capsys, text, needle):
    path = tmp_path / "scenario.json"
    path.write_text(text)
    assert one_line_error(capsys, path) == f"shoal: error: --scenario {path}: {needle}" + (
        " for a number)\n" if "too large" in needle else "\n"
    )


def test_cli_scenario_with_an_empty_name_is_an_error(capsys):
    # '' was taken as no --scenario: the default policy simulation ran, exit 0
    assert main(["simulate", "--scenario", ""]) == 2
    assert capsys.readouterr().err == "shoal: error: --scenario: expected a file name, got ''\n"


def test_cli_scenario_batch_past_the_planner_bound(tmp_path, capsys):
    # a global batch of 10^30 samples hung the replay's first step (the planner's float ties)
    path = write_scenario(tmp_path, scenario(), batch=[[0, 10**30]])
    err = one_line_error(capsys, path)
    assert err == (
        f"shoal: error: --scenario {path}: scenario: every global batch must be from 1 to "
        "10^18 samples\n"
    )


@pytest.mark.parametrize("field", ["startup_s", "notice_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_cli_scenario_provider_seconds_must_be_finite(tmp_path, capsys, field, value):
    # startup_s NaN replayed to a made-up time (850 s for this run's 315 s), exit 0
    sc = scenario()
    path = write_scenario(tmp_path, sc, provider={**sc.provider, field: value})
    assert one_line_error(capsys, path) == (
        f"shoal: error: --scenario {path}: provider start-up and notice must be finite "
        "seconds >= 0\n"
    )


def test_cli_scenario_replay_error_names_the_file(tmp_path, capsys):
    # the replay's own refusals (here: servers that take 10^7 s to start) named no file
    sc = scenario()
    path = write_scenario(tmp_path, sc, provider={**sc.provider, "startup_s": 1e7})
    err = one_line_error(capsys, path)
    assert err.startswith(
        f"shoal: error: --scenario {path}: scenario: the run does not finish within 30 days"
    ), err


def test_cli_scenario_spot_trace_with_a_nan_time(tmp_path, capsys):
    # a Bamboo line at NaN ms made a NaN lifetime: the replay ran, exit 0
    trace = tmp_path / "trace.csv"
    trace.write_text("nan,add,n1\nnan,remove,n1\n")
    sc = scenario()
    path = write_scenario(tmp_path, sc, provider={**sc.provider, "spot_trace": str(trace)})
    assert one_line_error(capsys, path) == (
        f"shoal: error: --scenario {path}: {trace}:1: expected 'ms,add|remove,node' or "
        "'kind,lifetime_s'\n"
    )
