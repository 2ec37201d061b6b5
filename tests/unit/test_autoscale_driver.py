"""`shoal run --provider local`: bad input is one line and exit code 2 before any worker starts;
the driver's small pure parts (tiers in --workers, the flags' parsing)."""

import pathlib
import re

import pytest

from driver_testing import make_driver, two_k80_members
from shoal.cli import main
from shoal.config import ProviderConfig
from shoal.config.provider import parse_duration, parse_usd, split_tiers
from shoal.errors import UserError

DIGITS = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "digits.py")
PROVIDER = ["--provider", "local"]


def run_error(capsys, tmp_path, workers, *extra, steps=2):
    out = tmp_path / "out"
    argv = ["run", DIGITS, "--workers", workers, "--steps", str(steps), "--out", str(out), *extra]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a flag's value itself
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert not (out / "metrics.jsonl").exists()  # refused before any worker started
    return err


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--autoscale", "--deadline", "1h"], "--autoscale needs --provider local"),
        (["--notice", "5"], "--notice needs --provider local"),  # the flag given, named
        ([*PROVIDER, "--autoscale"], "needs a goal"),
        ([*PROVIDER, "--autoscale", "--deadline", "1h", "--budget", "2usd"], "not both"),
        ([*PROVIDER, "--autoscale", "--deadline", "soon"], "--deadline"),
        ([*PROVIDER, "--autoscale", "--budget", "lots"], "--budget"),
        ([*PROVIDER, "--deadline", "1h"], "--autoscale"),
        ([*PROVIDER, "--autoscale", "--deadline", "1h", "--kinds", "v100,tpu9"], "tpu9"),
        ([*PROVIDER, "--notice", "soon"], "--notice"),
        ([*PROVIDER, "--kinds", " , "], "--kinds names no kind, got ' , '"),
        ([*PROVIDER, "--notice", "inf"], "--notice"),  # a notice at every lease's start
        ([*PROVIDER, "--outage", "k80:0-10"], "--outage: expected KIND:TIER"),  # no tier
        ([*PROVIDER, "--time-scale", "0"], "--time-scale"),
        # an infinite cadence trained every step, then failed on the scenario it could not write
        ([*PROVIDER, "--scale-every", "inf"], "--scale-every: invalid float value: 'inf'"),
        # its OUT/scenario.json would not load: a replay deciding every 1e-9 s hung
        (
            [*PROVIDER, "--scale-every", "0.5"],
            "--scale-every must be from 1 to 86,400 (emulated seconds), got 0.5",
        ),
        # the scaler never re-decided, and the give-up bound (6 x the cadence) never came
        (
            [*PROVIDER, "--scale-every", "1e300"],
            "--scale-every must be from 1 to 86,400 (emulated seconds), got 1e+300",
        ),
        ([*PROVIDER, "--outage", "k80:spot:later"], "--outage"),
        ([*PROVIDER, "--startup", "1e300"], "--startup must be from 0 to 86,400 s, got 1e+300"),
        ([*PROVIDER, "--startup", "nan"], "--startup: invalid float value: 'nan'"),
        ([*PROVIDER, "--startup", "-1"], "--startup must be from 0 to 86,400 s, got -1"),
        # billed $3.6e299 for 3 steps of digits
        ([*PROVIDER, "--time-scale", "1e300"], "--time-scale 1e+300: at most 1,000,000"),
        # the emulated micro-batch time underflowed to 0: an error naming no flag
        (
            [*PROVIDER, "--autoscale", "--deadline", "1h", "--time-scale", "5e-324"],
            "--time-scale 5e-324: at least 1e-06",
        ),
        # the scaler's count of mixes took gigabytes (a hang); each server a torch process
        (
            [*PROVIDER, "--autoscale", "--deadline", "1h", "--max-servers", "999999999"],
            "--max-servers 999999999: at most",
        ),
    ],
)
def test_bad_provider_flags(capsys, tmp_path, extra, needle):
    assert needle in run_error(capsys, tmp_path, "v100", *extra)


def test_tier_without_provider(capsys, tmp_path):
    err = run_error(capsys, tmp_path, "k80:spot")
    assert "k80:spot" in err and "needs --provider local" in err


def test_more_initial_servers_than_max_servers(capsys, tmp_path):
    """ "At most N servers at once": 3 were held with --max-servers 2."""
    err = run_error(capsys, tmp_path, "3xk80", *PROVIDER, "--max-servers", "2")
    assert "--workers buys 3 servers, more than --max-servers 2" in err


def test_malformed_spot_trace_names_file_and_line(capsys, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("k80,100\nk80,a while\n")
    err = run_error(capsys, tmp_path, "v100", *PROVIDER, "--spot-trace", str(trace))
    assert f"{trace}:2" in err


def test_a_worker_kind_the_provider_does_not_offer(capsys, tmp_path):
    """Refused at launch, after the run directory had its metrics and logs, in the provider's
    words ("does not offer 'k80'"), naming neither flag."""
    err = run_error(capsys, tmp_path, "v100,k80:spot", *PROVIDER, "--kinds", "v100")
    assert "--workers k80: not among --kinds v100" in err


def test_impossible_deadline_says_the_fastest_finish(capsys, tmp_path):
    extra = [*PROVIDER, "--autoscale", "--deadline", "1s", "--kinds", "v100,k80"]
    err = run_error(capsys, tmp_path, "k80", *extra, steps=100000)
    assert "impossible" in err and "fastest" in err


def test_the_launch_check_weighs_the_mixes_max_servers_allows(capsys, tmp_path):
    """The deadline is checked on at most --max-servers servers, as the scaler then decides
    (and the replay checks): the check counted up to 8 whatever the flag, so with one server
    allowed it named a 5-server mix the run could never hold."""
    extra = [*PROVIDER, "--autoscale", "--deadline", "1s", "--kinds", "v100,k80"]
    err = run_error(capsys, tmp_path, "k80", *extra, "--max-servers", "1", steps=100000)
    assert re.search(r"the fastest feasible finish is \d+ s, on 1 v100:\w+$", err.strip()), err


def test_budget_below_one_step(capsys, tmp_path):
    extra = [*PROVIDER, "--autoscale", "--budget", "0.0000000001usd"]
    err = run_error(capsys, tmp_path, "k80", *extra)
    assert "budget" in err and "below one step" in err


def test_split_tiers():
    assert split_tiers("2xk80:spot,v100") == ("2xk80,v100", ["spot", "spot", "on_demand"])
    assert split_tiers("p100:on_demand") == ("p100", ["on_demand"])
    with pytest.raises(UserError):
        split_tiers("k80:cheap")


def test_goal_parsing():
    assert parse_duration("45m", "--deadline") == 2700
    assert parse_duration("2h", "--deadline") == 7200
    assert parse_duration("900s", "--deadline") == parse_duration("900", "--deadline") == 900
    assert parse_usd("2.50usd", "--budget") == parse_usd("$2.5", "--budget") == 2.5
    cfg = ProviderConfig(name="local", quota=("k80:spot=2",), outages=("v100:spot:10-20",))
    assert cfg.quota_map == {("k80", "spot"): 2}
    assert cfg.outage_list == (("v100", "spot", 10.0, 20.0),)
    assert ProviderConfig(name="local", notice="none").notice_s is None


def test_driver_measures_host_overhead_and_batch_changes():
    from shoal.metrics.training import MembershipEvent, StepLine, WorkerShare

    d = make_driver(host_s=0.03)  # an estimate the measurements below do not confirm
    assert d.want == {("k80", "on_demand"): 1, ("k80", "spot"): 1}
    assert d.scenario().host_s == pytest.approx(0.3)  # the launcher's estimate, x 10
    shares = (WorkerShare("w0", 0, "k80", 2, 0.03), WorkerShare("w1", 1, "k80", 2, 0.03))
    for _ in range(3):
        d.observe(StepLine(step=0, global_batch_size=64, step_time_s=0.07, workers=shares))
    sc = d.scenario()
    # 0.03 s per k80 micro-batch / 3, x 10: the median of the estimate and three measurements
    assert sc.host_s == pytest.approx(0.1)
    assert sc.step_overhead_s == pytest.approx(0.1)  # 0.07 - 2 x 0.03, x 10
    d.redecide = False
    d.observe(StepLine(step=5, global_batch_size=128, step_time_s=0.07, workers=shares))
    assert d.redecide and d.scenario().batch == ((0, 64), (5, 128))
    # the recover line follows the new group's first step line (0.07 s): that step trained,
    # so the change cost is the rest, 0.5 - 0.07 wall s, x 10
    d.observe(MembershipEvent("recover", "w0", recovery_time_s=0.5))
    assert d.scenario().change_cost_s == pytest.approx(4.3)
    assert d.scenario().initial == {"k80:on_demand": 1, "k80:spot": 1}


def test_a_join_later_than_the_boot_is_the_startup_the_scaler_and_the_replay_count():
    from shoal.metrics.training import MembershipEvent

    d = make_driver()
    import types

    d.ctl, d.started = types.SimpleNamespace(t0=100.0), 100.0  # the clock started at wall 100
    assert d.measured.startup_s() == d.cfg.startup_s == 60.0
    lease = d.provider.request("k80", "spot", 50.0)  # requested at emulated 50 s
    d.book.bind(lease.server, "w5")
    d.book.leases[lease.server] = lease
    # admitted at wall 80 s after t0: emulated (100 + 80 - 100) x 10 = 800 s, 750 s after it
    d.observe(MembershipEvent("join", "w5", wall_time_s=80.0))
    assert d.measured.startup_s() == pytest.approx(750.0)
    assert d.scenario().join_delay_s == pytest.approx(750.0)
    assert [tuple(map(round, j)) for j in d.scenario().join_delays] == [(800, 750)]
    assert d.scenario().provider["startup_s"] == 60.0  # lifetimes run from the lease's ready_s
    assert all(o.startup_s == pytest.approx(750.0) for o in d.model.scaler_input(800.0, 0).offers)
    d.observe(MembershipEvent("join", "w0", wall_time_s=1.0))  # an initial server: not counted
    assert d.measured.startup_s() == pytest.approx(750.0)


def test_a_notice_is_weighed_by_the_scaler_before_the_mix_is_filled(tmp_path):
    """At a notice the scaler decides on the mix without the noticed server, as the simulator
    does (`sim.replay`, `on_leave`). The driver used to fill the last target first, buying a
    replacement the scaler would have let go (the spot bench's live runs cost 6-12 % more than
    their replays for it). And a replacement may boot during the notice: the noticed server
    does not count against --max-servers."""
    import dataclasses

    from shoal.control.mix_model import Mix

    d = make_driver(autoscale=True, deadline="10h", max_servers=2)
    ctl = two_k80_members(d, tmp_path / "metrics.jsonl", say=lambda text: None)
    workers = ctl.workers
    leases = d.book.leases
    spot = next(s for s, lease in leases.items() if lease.tier == "spot")
    leases[spot] = dataclasses.replace(leases[spot], revoke_at_s=1000.0, notice_s=30.0)
    seen = []

    def decide(inp):  # the scaler keeps what is held, as under its near-tie hysteresis
        seen.append(dict(inp.held))
        return Mix(counts=dict(inp.held), finish_s=1.0, cost_usd=1.0, step_s=1.0)

    d.scaler.decide = decide
    d.want = {("k80", "on_demand"): 1, ("k80", "spot"): 1}  # the last target: both servers
    d.redecide, d.next_decision_s = False, 1e9
    d.started, d.now = 0.0, lambda: 975.0  # inside the notice
    d.tick()
    assert seen == [{("k80", "on_demand"): 1}]  # decided at the notice, without the noticed one
    assert len(d.book.leases) == 2 and len(workers) == 2  # nothing bought
    assert [(e.action, e.worker) for e in ctl.pending] == [("notice", d.book.worker_of[spot])]
    # a target that does want a second server requests it now, although two leases are open
    d.want = {("k80", "on_demand"): 1, ("k80", "spot"): 1}
    d._fill(975.0)
    assert len(d.book.leases) == 3 and len(workers) == 3


def test_the_kinds_the_scaler_buys_default_to_the_workers_kinds_without_counts():
    """Was the --workers text itself: `2xk80` became an unknown device kind '2xk80'."""
    from shoal.cli import build_parser
    from shoal.cli.run import config_from_args

    argv = ["run", DIGITS, "--workers", "2xk80:spot,v100,k80", "--steps", "2", "--out", "o"]
    config = config_from_args(build_parser().parse_args([*argv, *PROVIDER]))
    assert config.provider.kind_list == ("k80", "v100")


def test_a_live_runs_scenario_loads_at_the_shortest_cadence(tmp_path):
    """OUT/scenario.json of a run with the smallest --scale-every (and every provider field the
    driver writes) loads in `shoal simulate --scenario`: the two sides share the bound."""
    import json

    from shoal.config.provider import MIN_SCALE_EVERY_S
    from shoal.sim.scenario import load_scenario

    d = make_driver(autoscale=True, deadline="10h", scale_every_s=MIN_SCALE_EVERY_S)
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(d.scenario().to_json()))
    assert load_scenario(str(path)).scale_every_s == MIN_SCALE_EVERY_S


def test_the_scenario_carries_the_runs_recovery_and_checkpoint_cadence():
    """A --recovery restart run's scenario.json replayed as a peers run, checkpointing every
    600 s whatever the run did: about 4x off its time and cost."""
    sc = make_driver().scenario()
    assert not sc.restart_from_checkpoint
    assert sc.checkpoint_every_s == pytest.approx(600 * 10.0)  # 600 wall s at time scale 10
    assert make_driver(recovery="restart").scenario().restart_from_checkpoint


def test_workers_that_never_get_past_starting_do_not_keep_the_run_buying(tmp_path):
    """Replacements revoked while they boot, again and again: a worker still starting reset the
    give-up bound, and a run bought 2,800 servers in 5 minutes. The bound counts from the last
    member's end; past it the driver buys nothing more."""
    import types

    d = make_driver()
    said = []
    starting = types.SimpleNamespace(state="starting")
    metrics = tmp_path / "metrics.jsonl"
    d.ctl = types.SimpleNamespace(
        steps_done=3, workers={"w5": starting}, members=[], pending=[], say=said.append,
        t0=0.0, metrics=metrics,
    )  # fmt: skip
    d.started, d.book.leases = 0.0, {}  # the first group trained; every server is gone
    d._fill = d._shrink = lambda *_: None  # (what it would request is not the point here)
    clock = iter([100.0, 100.0 + d.gave_up_after_s / 2, 101.0 + d.gave_up_after_s])
    d.now = lambda: next(clock)
    d.tick()
    d.tick()
    assert not d.gave_up and d.want  # within the bound: still buying
    d.tick()
    assert d.gave_up and d.want == {} and "buying no more" in said[-1]
    # a fixed mix writes its spend every --scale-every too (a resume after a hard kill bills
    # the open leases up to the last line: with none, from their open, at $0)
    assert '"kind": "cost"' in metrics.read_text()


def test_a_restarts_recover_line_is_the_restarted_groups_first_step(tmp_path):
    """--recovery restart: the stopped group may log a step after the stop (it is killed a poll
    later); that line made a recovery of 0.0007 s from a killed worker. The recover line waits
    for a step of a later generation, and times the stop to it."""
    import json
    import types

    from shoal.metrics.training import StepLine, WorkerShare

    d = make_driver(recovery="restart")
    metrics = tmp_path / "metrics.jsonl"
    d.ctl = types.SimpleNamespace(t0=0.0, metrics=metrics, steps_done=10)
    d.restarts.stopped = (10, 5.0, 8, 2)  # (steps done, stopped at, checkpoint step, generation)
    old = (WorkerShare("w0", 0, "k80", 4, 0.03),)
    d.observe(StepLine(step=9, generation=2, wall_time_s=5.1, workers=old))
    assert not metrics.exists() and d.restarts.stopped is not None
    new = (WorkerShare("w5", 0, "k80", 4, 0.03),)
    d.observe(StepLine(step=8, generation=3, wall_time_s=9.0, workers=new))
    (line,) = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert (line["event"], line["worker"], line["step"]) == ("recover", "w5", 8)
    assert line["recovery_time_s"] == pytest.approx(4.0) and d.restarts.stopped is None


def test_the_scaler_is_told_which_held_servers_still_boot(tmp_path):
    """A server bought at one decision and not yet joined at the next is held but booting: the
    scaler's input says so, with the time until it is expected ready (its request plus the
    start-up the scaler counts), so the model does not count it as training (it did)."""
    from shoal.control.mix_model import Mix

    d = make_driver(autoscale=True, deadline="10h", max_servers=3, startup_s=300.0)
    two_k80_members(d, tmp_path / "metrics.jsonl", say=lambda text: None)
    seen = []
    v100 = ("v100", "spot")

    def decide(inp):  # wants a V100 beside the two K80s held
        seen.append(inp)
        return Mix(counts={**inp.held, v100: 1}, finish_s=1.0, cost_usd=1.0, step_s=1.0)

    d.scaler.decide = decide
    d.started = 0.0
    for t in (100.0, 250.0):
        d.now = lambda t=t: t
        d.redecide = True
        d.tick()
    first, second = seen
    assert dict(first.booting) == {} and first.boot_left_s == 0.0
    assert dict(second.booting) == {v100: 1}  # requested at 100 s, still starting at 250 s
    assert second.boot_left_s == pytest.approx(100.0 + 300.0 - 250.0)
