"""The replay says when its goal was missed, as the live run does (`launcher/goalwatch.py`): the
result's `over_budget` / `past_deadline` (the end against the goal, `Goal`'s own tests), the
`decide` entries whose mix is the scaler's fallback, and `shoal simulate --scenario`'s line and
`--json` summary.

The autoscaled job: 600 steps on K80s and V100s (2 s and 1 s per micro-batch), 2 then 4
micro-batches per step, start-up 60 s, notice 30 s.
"""

import json

from shoal.cli import main
from shoal.control.scaler import Goal
from shoal.launcher.goalwatch import GoalWatch
from shoal.sim.replay import simulate
from shoal.sim.scenario import Scenario


def autoscaled(tmp_path, goal, lifetime=None, **extra):
    provider = {"kinds": "k80,v100", "seed": 1, "startup_s": 60.0, "notice_s": 30.0}
    if lifetime is not None:  # every spot server lives this long; no on-demand to be had
        (tmp_path / "life.csv").write_text(f"k80,{lifetime}\nv100,{lifetime}\n")
        provider["spot_trace"] = str(tmp_path / "life.csv")
        provider["quota"] = {"k80:on_demand": 0, "v100:on_demand": 0}
    fields = dict(
        steps=600, micro_batch_size=32, batch=((0, 64), (300, 128)), host_s=1.0,
        slowdowns={"k80": 2.0, "v100": 1.0}, step_overhead_s=0.5, change_cost_s=5.0,
        provider=provider, goal=goal, max_servers=4, scale_every_s=600.0, autoscale=True,
        initial={},
    )  # fmt: skip
    return Scenario(**{**fields, **extra})


def decisions(result) -> list[dict]:
    return [e for e in result.events if e["event"] == "decide"]


def test_a_budget_below_the_run_is_over_budget_and_every_decision_says_so(tmp_path):
    # $0.05 buys more than a step (the launch check passes) but not the run (about $0.29)
    result = simulate(autoscaled(tmp_path, {"budget_usd": 0.05}))
    assert result.cost_usd > 0.05
    assert (result.over_budget, result.past_deadline) == (True, False)
    assert decisions(result) and all(e.get("over_budget") is True for e in decisions(result))
    assert not any("past_deadline" in e for e in decisions(result))
    met = simulate(autoscaled(tmp_path, {"budget_usd": 1.0}))
    assert (met.over_budget, met.past_deadline) == (False, False)
    assert not any("over_budget" in e for e in decisions(met))


def test_a_deadline_revocations_push_past_is_past_deadline(tmp_path):
    # spot servers that live 200 s, no on-demand: the fastest mix meets 1,200 s at launch, the
    # run ends about 1,700 s; the decisions that see it coming are marked
    result = simulate(autoscaled(tmp_path, {"deadline_s": 1200.0}, lifetime=200))
    assert result.time_s > 1200 * 1.1
    assert (result.past_deadline, result.over_budget) == (True, False)
    marked = [e for e in decisions(result) if e.get("past_deadline")]
    assert marked and all(e["finish_s"] > 1200 for e in marked)
    assert not decisions(result)[0].get("past_deadline")  # the first mix was predicted in time
    met = simulate(autoscaled(tmp_path, {"deadline_s": 4 * 3600.0}))
    assert (met.past_deadline, met.over_budget) == (False, False)


def test_a_fixed_mix_has_no_goal_to_miss(tmp_path):
    # the live run's goal is the autoscaler's: a fixed mix past the scenario's deadline says
    # nothing, live or replayed
    sc = autoscaled(tmp_path, {"deadline_s": 100.0}, autoscale=False, initial={"k80:spot": 1})
    result = simulate(sc)
    assert result.time_s > 100 and (result.past_deadline, result.over_budget) == (False, False)


def test_cli_says_the_miss_in_the_live_end_lines_words(tmp_path, capsys):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(autoscaled(tmp_path, {"budget_usd": 0.05}).to_json()))
    assert main(["simulate", "--scenario", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["over_budget"], summary["past_deadline"]) == (True, False)
    assert main(["simulate", "--scenario", str(path)]) == 0
    out = capsys.readouterr().out
    live = GoalWatch(Goal(budget_usd=0.05)).end_line(summary["cost_usd"], 0, 0.0)
    assert f"cost {summary['cost_usd']:.4f} USD, over the budget of $0.0500, " in out
    assert ", over the budget of $0.0500;" in live and "past the deadline" not in out

    sc = autoscaled(tmp_path, {"deadline_s": 1200.0}, lifetime=200)
    path.write_text(json.dumps(sc.to_json()))
    assert main(["simulate", "--scenario", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["over_budget"], summary["past_deadline"]) == (False, True)
    assert main(["simulate", "--scenario", str(path)]) == 0
    out = capsys.readouterr().out
    end = summary["time_s"]
    words = f"; ended at {end:.0f} s, past the deadline of 1200 s"
    assert words in out and "over the budget" not in out
    assert GoalWatch(Goal(deadline_s=1200.0)).end_line(1.0, 0, end).endswith(words)
