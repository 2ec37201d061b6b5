"""TEMP stand-in for engineer A's scaler (issue 14 contract): single-kind mixes only, the
cheapest that meets a deadline or the fastest within a budget. Dropped at the merge."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shoal.cluster.provider import Offer
from shoal.errors import UserError


@dataclass(frozen=True)
class Goal:
    deadline_s: float | None = None
    budget_usd: float | None = None

    def __post_init__(self) -> None:
        if (self.deadline_s is None) == (self.budget_usd is None):
            raise UserError("give one goal: a deadline or a budget")


@dataclass(frozen=True)
class Mix:
    counts: dict[tuple[str, str], int]
    step_s: float
    finish_s: float
    cost_usd: float


@dataclass(frozen=True)
class ScalerInput:
    now_s: float
    steps_done: int
    steps_total: int
    batch_at: Callable[[int], int]
    step_time: Callable[[Mapping[str, int], int], float]
    offers: list[Offer]
    held: Mapping[tuple[str, str], int]
    spent_usd: float
    change_cost_s: float
    revocations_per_s: Callable[[str], float]


def _candidates(inp: ScalerInput, max_servers: int) -> list[Mix]:
    left = inp.steps_total - inp.steps_done
    batch = inp.batch_at(inp.steps_done)
    out = []
    for o in sorted(inp.offers, key=lambda o: (o.kind, o.tier)):
        for n in range(1, min(max_servers, o.quota) + 1):
            step_s = inp.step_time({o.kind: n}, batch)
            changes = 0 if inp.held.get((o.kind, o.tier)) == n else 1
            time_s = left * step_s + changes * inp.change_cost_s
            cost = inp.spent_usd + n * o.usd_per_hour * time_s / 3600.0
            out.append(Mix({(o.kind, o.tier): n}, step_s, inp.now_s + time_s, cost))
    return out


class Scaler:
    def __init__(self, goal: Goal, max_servers: int = 8):
        self.goal, self.max_servers = goal, max_servers

    def decide(self, inp: ScalerInput) -> Mix:
        mixes = _candidates(inp, self.max_servers)
        if not mixes:
            return Mix({}, math.inf, math.inf, inp.spent_usd)
        if self.goal.deadline_s is not None:
            ok = [m for m in mixes if m.finish_s <= self.goal.deadline_s]
            return min(ok, key=lambda m: m.cost_usd) if ok else self.fastest(inp)
        ok = [m for m in mixes if m.cost_usd <= self.goal.budget_usd]
        return min(ok, key=lambda m: m.finish_s) if ok else min(mixes, key=lambda m: m.cost_usd)

    def fastest(self, inp: ScalerInput) -> Mix:
        mixes = _candidates(inp, self.max_servers)
        return min(mixes, key=lambda m: (m.finish_s, m.cost_usd))


def check_goal(goal: Goal, inp: ScalerInput) -> None:
    mixes = _candidates(inp, 8)
    if goal.deadline_s is not None:
        best = min(mixes, key=lambda m: m.finish_s)
        if best.finish_s > goal.deadline_s:
            what = ", ".join(f"{n}x{k}:{t}" for (k, t), n in best.counts.items())
            raise UserError(
                f"--deadline {goal.deadline_s:g}s is impossible: the fastest feasible finish is "
                f"{best.finish_s:.0f}s ({what})"
            )
    else:
        batch = inp.batch_at(0)
        cheapest = min(
            inp.step_time({o.kind: 1}, batch) * o.usd_per_hour / 3600 for o in inp.offers
        )
        if cheapest > goal.budget_usd:
            raise UserError(
                f"--budget {goal.budget_usd:g}usd is below one step (${cheapest:.4f} at least)"
            )


def revocation_rate(model, kind: str) -> float:
    rng = random.Random(f"rate:{kind}")
    lives = [model.sample_lifetime_s(kind, rng) for _ in range(200)]
    finite = [x for x in lives if math.isfinite(x)]
    return 0.0 if not finite else len(finite) / len(lives) / (sum(finite) / len(finite))
