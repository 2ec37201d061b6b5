"""The scaler: which servers to hold -- how many of which kind, spot or on-demand.

One pure object decides for both drivers (the live run and `sim.replay`). Its goal is either
to minimise cost subject to a deadline or to minimise time subject to a budget. A candidate mix
is a count per (kind, tier), at most `max_servers` in all and at most each offer's quota; it is
judged by `control.mix_model.MixModel`'s prediction of the rest of the run (its finish time and
total cost, revocations and the move from the held mix counted).

The search is exact (every mix) when there are at most `EXACT_LIMIT` mixes, else a
deterministic local search (add, remove or swap one server) from the best single-key mixes and
the held mix. Ties break on time, cost, fewer servers, then the key order: deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shoal.control.mix_model import Mix, MixModel, ScalerInput
from shoal.errors import UserError

MAX_DEADLINE_S = 365 * 86400.0
EXACT_LIMIT = 20000  # mixes evaluated one by one at most; beyond, the local search
# Every decision weighs up to max_servers of each kind and tier (counting the mixes alone is
# keys x max_servers^2): 999,999,999 asked for gigabytes and hung; 1,000 takes ~0.2 s with 8
# keys. A live run's servers are local processes, at most 8 per core.
MAX_SERVERS = 1_000
_SLACK = 1e-9  # relative float slack on a deadline or a budget


def _within(value: float, limit: float) -> bool:
    """Whether a predicted finish or cost is within a deadline or a budget: every rule's test."""
    return value <= limit * (1 + _SLACK)


# NEAR_BEST: mixes whose objective (cost under a deadline, remaining time under a budget) is
# within this fraction of the best one's are near-ties, inside the model's own error (the live
# runs and their replays agree on the mean within about 5 %). Among them the held mix is kept
# (acting on a near-tie costs membership changes and, live, start-ups: a live run dropped 2 of
# 4 servers for a 0.4 % saving and finished 4.5 h later than its own prediction), else under
# a deadline the FASTEST is taken, not the cheapest by a hair: the cheapest meeting a deadline
# is the slowest that still meets it (one server for two at about the same price), so a run
# that rides the deadline's edge, after its next revocation, has to buy servers late (each
# paying a boot), and two drivers that differ by a hair part at that choice.
NEAR_BEST = 0.05


@dataclass(frozen=True)
class Goal:
    deadline_s: float | None = None  # minimise cost subject to finishing by this time
    budget_usd: float | None = None  # or minimise time subject to spending at most this

    def __post_init__(self) -> None:
        if (self.deadline_s is None) == (self.budget_usd is None):
            raise UserError("the scaler needs exactly one goal: a deadline or a budget")
        value = self.deadline_s if self.deadline_s is not None else self.budget_usd
        if not (value > 0 and math.isfinite(value)):
            raise UserError("a deadline or a budget must be a positive number")
        if self.deadline_s is not None and self.deadline_s > MAX_DEADLINE_S:
            # a replay runs to 10 x the deadline: 1e12 s looped ~17 min to its event guard
            raise UserError(f"a deadline of at most 365 days, got {self.deadline_s:g} s")

    def over_budget(self, cost_usd: float) -> bool:
        """Whether a predicted total cost is beyond the budget (never under a deadline): the
        budget rule's own test (`_by_budget`)."""
        return self.budget_usd is not None and not _within(cost_usd, self.budget_usd)

    def past_deadline(self, finish_s: float) -> bool:
        """Whether a predicted finish (seconds from the launch) is after the deadline (never
        under a budget): the deadline rule's own test (`_by_deadline`, `check_goal`)."""
        return self.deadline_s is not None and not _within(finish_s, self.deadline_s)

    def misses(self, cost_usd: float, finish_s: float) -> dict[str, bool]:
        """{"over_budget": True} and/or {"past_deadline": True} for a cost and finish that miss
        the goal: the marks of a decision's cost line or replay event, and of a run's end."""
        over, late = self.over_budget(cost_usd), self.past_deadline(finish_s)
        return {k: True for k, v in (("over_budget", over), ("past_deadline", late)) if v}

    def missed_words(self, cost_usd: float, end_s: float) -> tuple[str, str]:
        """The clauses a run's end line adds when it missed the goal (each "" if not): after
        the cost, ", over the budget of $B"; at the end, "; ended at T s, past the deadline of
        D s". The live run's console and `shoal simulate --scenario` say them alike."""
        over = f", over the budget of ${self.budget_usd:.4f}" if self.over_budget(cost_usd) else ""
        late = ""
        if self.past_deadline(end_s):
            late = f"; ended at {end_s:.0f} s, past the deadline of {self.deadline_s:.0f} s"
        return over, late


Rank = Callable[[float, float], tuple]  # (finish_s, cost_usd) -> sort key


def _moves(i: int, n_keys: int) -> Iterator[tuple[int, ...]]:
    """One step of the local search from key i: add one, remove one, or move one to key j."""
    unit = [tuple(int(k == j) for k in range(n_keys)) for j in range(n_keys)]
    yield unit[i]
    yield tuple(-x for x in unit[i])
    for j in range(n_keys):
        if j != i:
            yield tuple(b - a for a, b in zip(unit[i], unit[j], strict=True))


def _search(model: MixModel, max_servers: int, rank: Rank, start: Mix | None = None) -> Mix:
    def key(counts: tuple[int, ...]) -> tuple:
        finish_s, cost_usd, _ = model.predict(counts)
        return (*rank(finish_s, cost_usd), sum(counts), counts)

    if not any(model.caps):
        raise UserError("the provider has no capacity to offer now (every quota is 0)")
    if model.count_mixes(max_servers) <= EXACT_LIMIT:
        return model.mix(min(model.all_mixes(max_servers), key=key))
    n_keys = len(model.keys)
    starts = [
        tuple(n if j == i else 0 for j in range(n_keys))
        for i in range(n_keys)
        for n in range(1, model.caps[i] + 1)
    ]
    if any(model.held) and sum(model.held) <= max_servers:
        starts.append(tuple(min(h, c) for h, c in zip(model.held, model.caps, strict=True)))
    if start is not None:  # a second pass: from the first pass's answer
        starts.append(tuple(start.counts.get(k, 0) for k in model.keys))
    best = min(starts, key=key)
    while True:
        moves = []
        for i in range(n_keys):
            for delta in _moves(i, n_keys):
                c = tuple(n + d for n, d in zip(best, delta, strict=True))
                fits = all(0 <= n <= cap for n, cap in zip(c, model.caps, strict=True))
                if fits and 0 < sum(c) <= max_servers:
                    moves.append(c)
        nxt = min(moves, key=key, default=best)
        if key(nxt) >= key(best):
            return model.mix(best)
        best = nxt


def _by_deadline(deadline_s: float) -> Rank:
    def rank(finish_s: float, cost_usd: float) -> tuple:
        if _within(finish_s, deadline_s):
            return (0, cost_usd, finish_s)
        return (1, finish_s, cost_usd)  # none meets it: the fastest

    return rank


def _by_budget(budget_usd: float) -> Rank:
    def rank(finish_s: float, cost_usd: float) -> tuple:
        if _within(cost_usd, budget_usd):
            return (0, finish_s, cost_usd)
        return (1, cost_usd, finish_s)  # none fits it: the cheapest

    return rank


def _fastest(finish_s: float, cost_usd: float) -> tuple:
    return (finish_s, cost_usd)


def _second(near: Callable[[float, float], bool], by_time: bool) -> Rank:
    """The second choice among the near-best mixes: the fastest under a deadline (it leaves
    the most slack against it), the cheapest under a budget; the others rank after them."""

    def rank(finish_s: float, cost_usd: float) -> tuple:
        first, second = (finish_s, cost_usd) if by_time else (cost_usd, finish_s)
        return (0 if near(finish_s, cost_usd) else 1, first, second)

    return rank


class Scaler:
    def __init__(self, goal: Goal, max_servers: int = 8) -> None:
        if max_servers < 1:
            raise UserError("--max-servers must be >= 1")
        if max_servers > MAX_SERVERS:
            raise UserError(f"--max-servers {max_servers}: at most {MAX_SERVERS:,}")
        self.goal = goal
        self.max_servers = max_servers
        self.margin = NEAR_BEST

    def decide(self, inp: ScalerInput) -> Mix:
        """The target mix: under a deadline, the FASTEST of the mixes that meet it within
        `margin` of the cheapest cost (else the fastest); under a budget, the CHEAPEST of those
        within `margin` of the fastest finish (else the cheapest). The held mix, when it is
        one of those near-best mixes, is kept (see `NEAR_BEST`)."""
        model = MixModel(inp, self.max_servers)
        if self.goal.deadline_s is not None:
            rank = _by_deadline(self.goal.deadline_s)
        else:
            rank = _by_budget(self.goal.budget_usd)
        best = _search(model, self.max_servers, rank)
        if rank(best.finish_s, best.cost_usd)[0] != 0:
            return best  # nothing meets the goal: the fastest (or the cheapest)
        near = self._near(best, inp.now_s)
        held = model.mix(model.held) if any(model.held) else None
        if held is not None and near(held.finish_s, held.cost_usd):
            return held  # acting on a near-tie costs changes and boots for nothing
        second = _second(near, self.goal.deadline_s is not None)
        return _search(model, self.max_servers, second, start=best)

    def _near(self, best: Mix, now_s: float) -> Callable[[float, float], bool]:
        """Whether a mix meets the goal and is within `margin` of the best one's objective
        (the total cost under a deadline; the remaining time under a budget)."""
        goal, margin = self.goal, 1 + self.margin + _SLACK

        def near(finish_s: float, cost_usd: float) -> bool:
            if goal.deadline_s is not None:
                meets = _within(finish_s, goal.deadline_s)
                return meets and cost_usd <= best.cost_usd * margin
            fits = _within(cost_usd, goal.budget_usd)
            return fits and finish_s - now_s <= (best.finish_s - now_s) * margin

        return near

    def fastest(self, inp: ScalerInput) -> Mix:
        """The mix predicted to finish first (ties: the cheaper)."""
        return _search(MixModel(inp, self.max_servers), self.max_servers, _fastest)


def check_goal(goal: Goal, inp: ScalerInput, max_servers: int) -> None:
    """UserError when the goal cannot be met at all on at most `max_servers` servers (the
    scaler's limit, passed by each driver: a default here once checked the live run against 8
    whatever its --max-servers): a deadline before the fastest feasible finish (named, with its
    mix), or a budget that does not pay for one step."""
    model = MixModel(inp, max_servers)
    if not any(model.caps):
        raise UserError("the provider has no capacity to offer now (every quota is 0)")
    if goal.budget_usd is not None:
        step_usd, where = min(
            (p * model.step_s({kind: 1}, model.batch_now) / 3600.0, f"1 {kind}:{tier}")
            for (kind, tier), p, cap in zip(model.keys, model.price, model.caps, strict=True)
            if cap > 0
        )
        if goal.budget_usd - inp.spent_usd < step_usd:
            raise UserError(
                f"budget {goal.budget_usd:.4g} USD is below one step (the cheapest step costs "
                f"{step_usd:.4g} USD, on {where})"
            )
        return
    fast = Scaler(goal, max_servers).fastest(inp)
    if goal.past_deadline(fast.finish_s):
        raise UserError(
            f"deadline {goal.deadline_s:.0f} s is impossible: the fastest feasible finish is "
            f"{_seconds(fast.finish_s)} s, on {fast.describe()}"
        )


def _seconds(value: float) -> str:
    """Whole seconds, or 3 significant digits past 10^9 (a 1e300 s micro-batch printed a
    300-digit finish)."""
    return f"{value:.0f}" if value < 1e9 else f"{value:.3g}"
