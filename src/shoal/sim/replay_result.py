"""What a scenario replay (`replay.py`) returns: its time, cost, revocations and event log."""

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

    def summary(self) -> dict:
        """The result without its event log (what `--json` prints)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "events"}
