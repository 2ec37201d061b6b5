"""TEMP stand-in for engineer A's scenario (issue 14 contract): the JSON-able scenario of a
live run and the shared step-time model. Dropped at the merge."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shoal.errors import UserError
from shoal.perf.step_time import split, step_seconds


@dataclass(frozen=True)
class Scenario:
    steps: int
    micro_batch_size: int
    batch: tuple[tuple[int, int], ...]
    host_s: float
    slowdowns: dict[str, float]
    step_overhead_s: float
    change_cost_s: float
    provider: dict
    goal: dict
    max_servers: int
    scale_every_s: float
    autoscale: bool
    initial: dict[str, int]

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["batch"] = [list(p) for p in self.batch]
        return out

    @classmethod
    def from_json(cls, raw: dict) -> Scenario:
        try:
            raw = dict(raw, batch=tuple(tuple(p) for p in raw["batch"]))
            return cls(**raw)
        except (KeyError, TypeError) as exc:
            raise UserError(f"bad scenario: {exc}") from None


def step_time_model(sc: Scenario) -> Callable[[Mapping[str, int], int], float]:
    def step_time(gpus: Mapping[str, int], batch: int) -> float:
        seconds = [sc.host_s * sc.slowdowns[k] for k, n in sorted(gpus.items()) for _ in range(n)]
        if not seconds:
            return float("inf")
        plan = split(max(1, batch // sc.micro_batch_size), seconds)
        return step_seconds(plan, seconds) + sc.step_overhead_s

    return step_time
