"""What an autoscaled run says of its goal (`launcher/goalwatch.py`): a budget or deadline out
of reach is said on the console and marked in the cost lines, a goal back within reach is said
too, and the end's cost line says an overrun."""

import json
import re

import pytest

from driver_testing import make_driver, two_k80_members


def goal_run(tmp_path, times, **goal):
    """An autoscaled driver under `goal` (budget= or deadline=), two k80 members, ticked at
    these emulated times: (the driver, its console lines, its cost lines)."""
    d = make_driver(out=tmp_path, autoscale=True, scale_every_s=60.0, **goal)
    said, metrics = [], tmp_path / "metrics.jsonl"
    two_k80_members(d, metrics, say=said.append)
    d.started = 0.0
    for t in times:
        d.now = lambda t=t: t
        d.tick()
    assert not d.gave_up and d.want  # it goes on buying
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    return d, said, [x for x in lines if x["kind"] == "cost"]


def test_a_budget_that_can_no_longer_finish_the_run_is_said_once(tmp_path):
    """Under --budget, when no mix finishes within it the scaler keeps the cheapest mix that
    finishes and the run goes on: it overran its budget with no word (a live run of $0.05
    spent $0.1078, each decision's line projecting $0.109). Now the first such decision says
    so on the console, once, and every decision's cost line over the budget is marked."""
    d, said, costs = goal_run(tmp_path, [100.0, 130.0, 200.0, 300.0, 400.0], budget="0.0001usd")
    warned = [s for s in said if s.startswith("warning:")]
    assert len(warned) == 1, said
    assert re.fullmatch(
        r"warning: the budget of \$0\.0001 can no longer finish the run \(spent \$\d+\.\d{4}, "
        r"\$\d+\.\d{4} more needed at the cheapest mix, 1xk80:spot\); continuing at that mix",
        warned[0],
    ), warned[0]
    decisions = [x for x in costs if "projected_usd" in x]
    assert len(decisions) >= 4 and all(x["over_budget"] is True for x in decisions)
    assert all(x["projected_usd"] > 0.0001 for x in decisions)
    assert decisions[0]["mix"] == {"k80:on_demand": 1, "k80:spot": 1}  # what was held then
    assert not [x for x in costs if "past_deadline" in x]
    # the end's cost line says the spend went over the budget (it said only the spend)
    d.finish()
    assert re.fullmatch(
        r"cost \$\d+\.\d{4}, over the budget of \$0\.0001; 0 revocations", said[-1]
    ), said[-1]


def test_a_deadline_that_can_no_longer_be_met_is_said_once(tmp_path):
    """Under --deadline, when no mix finishes by it the scaler switches to the fastest mix and
    the run goes on, as under a budget, but it did so with no word. Now the first such
    decision says so on the console, once, every decision's cost line past the deadline is
    marked, and the end's cost line says that the run ended after its deadline. (Here the
    first decision meets the deadline, 167 s of 170; the steps then stall.)"""
    d, said, costs = goal_run(tmp_path, [100.0, 130.0, 200.0, 300.0, 400.0], deadline="170s")
    warned = [s for s in said if s.startswith("warning:")]
    assert len(warned) == 1, said
    assert warned[0] == (
        "warning: the deadline of 170 s can no longer be met (at 200 s the fastest mix "
        "finishes at 262 s, on 3xk80:spot, 5xv100:spot); continuing at that mix"
    )
    assert said.index(warned[0]) == 1 + next(i for i, s in enumerate(said) if "t=200s" in s)
    decisions = [x for x in costs if "projected_finish_s" in x]
    assert len(decisions) == 4 and "past_deadline" not in decisions[0]  # t=100 s: met
    assert all(x["past_deadline"] is True for x in decisions[1:])
    assert all(x["projected_finish_s"] > 170.0 for x in decisions[1:])
    assert not [x for x in costs if "over_budget" in x]
    d.finish()
    assert re.fullmatch(
        r"cost \$\d+\.\d{4}; 0 revocations; ended at 400 s, past the deadline of 170 s",
        said[-1],
    ), said[-1]


def test_a_goal_back_within_reach_is_said_once_per_change():
    """The miss was said once per run, and never taken back: a run whose measured steps
    later sped up kept 'can no longer be met' as the console's last word on its deadline.
    Now each change is one line (missed, back, missed again), and no decision repeats one."""
    from shoal.control.mix_model import Mix
    from shoal.control.scaler import Goal
    from shoal.launcher.goalwatch import GoalWatch

    watch = GoalWatch(Goal(deadline_s=1000.0))
    fast = Mix({("v100", "spot"): 2}, step_s=1.0, finish_s=900.0, cost_usd=1.0)
    late = Mix({("v100", "spot"): 4}, step_s=1.0, finish_s=1500.0, cost_usd=2.0)
    news = [watch.news(m) for m in (fast, late, late, fast, fast, late)]
    assert news == [None, "missed", None, "back", None, "missed"]
    watch.news(fast)
    assert watch.back_line(600.0, fast) == (
        "the deadline of 1000 s is within reach again (at 600 s: finish at 900 s on 2xv100:spot)"
    )
    budget = GoalWatch(Goal(budget_usd=1.5))
    assert [budget.news(m) for m in (late, fast)] == ["missed", "back"]
    assert budget.back_line(10.0, fast).startswith("the budget of $1.5000 is within reach again")
    assert GoalWatch(None).news(late) is None  # a fixed mix has no goal


@pytest.mark.parametrize("goal", [{"budget": "1000usd"}, {"deadline": "10h"}])
def test_a_goal_that_is_met_says_nothing(tmp_path, goal):
    d, said, costs = goal_run(tmp_path, [100.0, 200.0, 300.0], **goal)
    assert not [s for s in said if "warning" in s] and costs
    assert not [x for x in costs if "over_budget" in x or "past_deadline" in x]
    d.finish()
    assert re.fullmatch(r"cost \$\d+\.\d{4}; 0 revocations", said[-1]), said[-1]
