"""What an autoscaled run says of its goal (`--budget` or `--deadline`) once it is out of reach.

The launch check refuses a budget below one step and a deadline the fastest mix misses; later
no mix may meet the goal any more (revocations bought dearer or slower replacements, the
measured steps are slower than the launch estimate, or the goal was simply too tight). The
scaler then holds the cheapest mix that finishes (a budget) or the fastest (a deadline), and
the run goes on at it: stopping would lose the work paid for. It is said, in the run's style:
- on the console, at the first decision that finds it (`warning`), and, if a later decision
  finds the goal within reach again (faster measured steps, cheaper offers), that too
  (`back_line`): the console's last word on the goal is the latest decision's, one line per
  change of it, never one per decision;
- in each such decision's cost line: `over_budget` or `past_deadline` (`marks`);
- at the end, in the console's cost line, when the spend went over the budget or the run
  ended past its deadline, predicted or not (`end_line`).
The tests are the scaler's own rules, with their slack (`Goal.over_budget`,
`Goal.past_deadline`).
"""

from __future__ import annotations

import math

from shoal.control.mix_model import Mix
from shoal.control.scaler import Goal
from shoal.launcher.leases import lease_label


class GoalWatch:
    """The goal of one run (None: a fixed mix, no goal) and whether its miss was said."""

    def __init__(self, goal: Goal | None) -> None:
        self.goal = goal
        self.missing = False  # the console's last word: the goal can no longer be met

    def marks(self, mix: Mix) -> dict[str, bool]:
        """A decision's marks (`Goal.misses`; none without a goal): when it misses the goal,
        no mix meets it and `mix` is the scaler's fallback."""
        return self.goal.misses(mix.cost_usd, mix.finish_s) if self.goal else {}

    def news(self, mix: Mix) -> str | None:
        """What this decision changes in what the console said of the goal: "missed" (the
        first decision that misses it, or the first after it was back within reach), "back"
        (the first that meets it after a miss was said), None (nothing new)."""
        if bool(self.marks(mix)) == self.missing:
            return None
        self.missing = not self.missing
        return "missed" if self.missing else "back"

    def warning(self, now: float, spent: float, mix: Mix) -> str:
        """The console's warning at the first miss, at emulated `now` with `spent` so far."""
        goal, label = self.goal, lease_label(mix.counts)
        if goal.budget_usd is not None:
            if math.isfinite(mix.cost_usd):
                why = f"spent ${spent:.4f}, ${mix.cost_usd - spent:.4f} more needed at the "
                why, then = why + f"cheapest mix, {label}", "that mix"
            else:
                why, then = f"spent ${spent:.4f}; no mix is predicted to finish", label
            missed = f"the budget of ${goal.budget_usd:.4f} can no longer finish the run"
        else:
            if math.isfinite(mix.finish_s):
                why = f"at {now:.0f} s the fastest mix finishes at {mix.finish_s:.0f} s, on {label}"
                then = "that mix"
            else:
                why, then = f"at {now:.0f} s no mix is predicted to finish", label
            missed = f"the deadline of {goal.deadline_s:.0f} s can no longer be met"
        return f"warning: {missed} ({why}); continuing at {then}"

    def back_line(self, now: float, mix: Mix) -> str:
        """The console's line when a decision finds the goal within reach again."""
        goal, label = self.goal, lease_label(mix.counts)
        if goal.budget_usd is not None:
            return (
                f"the budget of ${goal.budget_usd:.4f} is within reach again (at {now:.0f} s: "
                f"${mix.cost_usd:.4f} in all on {label})"
            )
        return (
            f"the deadline of {goal.deadline_s:.0f} s is within reach again (at {now:.0f} s: "
            f"finish at {mix.finish_s:.0f} s on {label})"
        )

    def end_line(self, total_usd: float, revocations: int, end_s: float) -> str:
        """The end's console cost line: the spend and the revocations, and, briefly, a budget
        the spend went over or a deadline the run ended after (emulated `end_s`)."""
        over, late = self.goal.missed_words(total_usd, end_s) if self.goal else ("", "")
        return f"cost ${total_usd:.4f}{over}; {revocations} revocations{late}"
