"""What a scenario replay (`replay.py`) returns: its time, cost, revocations and event log, and
whether it missed its goal.

The goal verdict is the live run's (`launcher/goalwatch.py`): a decision whose mix is the
scaler's fallback (no mix meets the goal) is marked `over_budget` / `past_deadline`, and so is
the end when its cost or time misses the goal, by `Goal.misses` (the scaler's own tests, with
its slack).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ScenarioResult:
    time_s: float
    cost_usd: float
    revocations: int
    changes: int
    cost_by_kind: dict[str, float]
    events: tuple[dict, ...]
    lost_steps: float = 0.0  # training lost to revocations (in-flight steps, rollbacks)
    over_budget: bool = False  # the end's cost beyond the budget (`Goal.misses`)
    past_deadline: bool = False  # the end's time past the deadline

    def summary(self) -> dict:
        """The result without its event log (what `--json` prints)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "events"}
