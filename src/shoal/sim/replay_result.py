"""What a scenario replay (`replay.py`) returns: its time, cost, revocations and event log, and
whether it missed its goal.

The goal verdict is the live run's (`launcher/goalwatch.py`): a decision whose mix is the
scaler's fallback (no mix meets the goal) is marked `over_budget` / `past_deadline`, and so is
the end when its cost or time misses the goal, by `Goal`'s own tests with the scaler's slack.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from shoal.control.scaler import Goal


@dataclass(frozen=True)
class ScenarioResult:
    time_s: float
    cost_usd: float
    revocations: int
    changes: int
    cost_by_kind: dict[str, float]
    events: tuple[dict, ...]
    lost_steps: float = 0.0  # training lost to revocations (in-flight steps, rollbacks)
    over_budget: bool = False  # the end's cost beyond the budget (`goal_marks`)
    past_deadline: bool = False  # the end's time past the deadline

    def summary(self) -> dict:
        """The result without its event log (what `--json` prints)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "events"}


def goal_marks(goal: Goal, cost_usd: float, finish_s: float) -> dict[str, bool]:
    """{"over_budget": True} and/or {"past_deadline": True} when a cost or finish misses the
    goal, as the live run marks its decisions' cost lines and says it at its end
    (`launcher/goalwatch.py`): `Goal`'s own tests, with the scaler's slack."""
    over, late = goal.over_budget(cost_usd), goal.past_deadline(finish_s)
    return {k: True for k, v in (("over_budget", over), ("past_deadline", late)) if v}
