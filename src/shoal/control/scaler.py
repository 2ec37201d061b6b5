"""The scaler: which servers to hold -- how many of which kind, spot or on-demand.

One pure object decides for both drivers (the live run and `sim.replay`). Its goal is either
to minimise cost subject to a deadline or to minimise time subject to a budget. A candidate mix
is a count per (kind, tier), at most `max_servers` in all and at most each offer's quota; it is
judged by a prediction of the rest of the run:

- compute time: the remaining steps at the forecast global batch, each at the shared step-time
  model's seconds per step on the mix's GPUs (`inp.step_time`: `profile_step_time` below, which
  both drivers pass in, the simulator through `sim.scenario.step_time_model`);
- revocations: a spot server of kind k is revoked at rate r_k (`revocation_rate`); each costs
  its leave and its replacement's join (2 x change_cost_s), the expected part of the in-flight
  step that a notice too short to finish it loses (`_in_flight_loss`), and the replacement's
  start-up at the reduced speed of the mix without it. With lam = sum over spot servers of
  r_k x loss_k, the time lost is the fraction lam of the time spent, so the remaining time is
  compute / (1 - lam) (a mix with lam >= 1 never finishes);
- the move from `held` to the mix: joins (billed from now, ready after start-up) and leaves are
  each one membership change of change_cost_s; a mix keeping no held server waits the start-up;
- cost: what was spent plus the mix's price per hour over the predicted remaining time.

The search is exact (every mix) when there are at most `EXACT_LIMIT` mixes, else a
deterministic local search (add, remove or swap one server) from the best single-key mixes and
the held mix. Ties break on time, cost, fewer servers, then the key order: deterministic.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from shoal.cluster.provider import Offer
from shoal.cluster.revocation import GCE_MAX_LIFETIME_S, RevocationModel
from shoal.errors import UserError
from shoal.perf import step_time as perf_step_time
from shoal.perf.devices import load_devices

MAX_DEADLINE_S = 365 * 86400.0
EXACT_LIMIT = 20000  # mixes evaluated one by one at most; beyond, the local search
# Every decision weighs up to max_servers of each kind and tier (counting the mixes alone is
# keys x max_servers^2): 999,999,999 asked for gigabytes and hung; 1,000 takes ~0.2 s with 8
# keys. A live run's servers are local processes, at most 8 per core.
MAX_SERVERS = 1_000
RATE_SAMPLES = 4000  # lifetimes drawn to estimate a revocation rate
_SLACK = 1e-9  # relative float slack on a deadline or a budget
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
        return self.budget_usd is not None and cost_usd > self.budget_usd * (1 + _SLACK)

    def past_deadline(self, finish_s: float) -> bool:
        """Whether a predicted finish (seconds from the launch) is after the deadline (never
        under a budget): the deadline rule's own test (`_by_deadline`, `check_goal`)."""
        return self.deadline_s is not None and finish_s > self.deadline_s * (1 + _SLACK)


@dataclass(frozen=True)
class Mix:
    counts: dict[tuple[str, str], int]  # (kind, tier) -> servers wanted
    step_s: float  # predicted seconds per step on this mix (at the forecast batch)
    finish_s: float  # predicted finish time (emulated, from launch), revocations counted
    cost_usd: float  # predicted total cost of the run (spent + remaining), revocations counted

    def describe(self) -> str:
        return ", ".join(f"{n} {k}:{t}" for (k, t), n in sorted(self.counts.items())) or "none"


@dataclass(frozen=True)
class ScalerInput:
    now_s: float
    steps_done: int
    steps_total: int
    batch: Sequence[tuple[int, int]]  # forecast global batch: (from step, batch) pieces, in order
    step_time: Callable[[Mapping[str, int], int], float]  # (GPUs per kind, batch) -> s/step
    offers: list[Offer]  # what can be had now (quota: the total, held included)
    held: Mapping[tuple[str, str], int]  # servers held now, ready or booting
    spent_usd: float
    change_cost_s: float  # seconds lost per membership change
    revocations_per_s: Callable[[str], float]  # expected revocations per second of a spot server


def batch_at(pieces: Sequence[tuple[int, int]], step: int) -> int:
    """The batch of (from step, batch) `pieces` at `step`: the last piece starting at or before
    it (the first piece's before any)."""
    value = pieces[0][1]
    for start, batch in pieces:
        if start <= step:
            value = batch
    return value


def remaining_batches(
    pieces: Sequence[tuple[int, int]], done: int, total: int
) -> list[tuple[int, int]]:
    """(batch, steps) of steps done..total-1, per batch, in batch order: counted per piece,
    not per step (a run of 10^9 steps counted them one by one at every decision, a hang)."""
    todo: Counter[int] = Counter()
    for i, (start, batch) in enumerate(pieces):
        lo = max(done, start) if i else done  # before the first piece: its batch
        hi = min(total, pieces[i + 1][0] if i + 1 < len(pieces) else total)
        if hi > lo:
            todo[batch] += hi - lo
    return sorted(todo.items())


def revocation_rate(model: RevocationModel, kind: str) -> float:
    """Revocations per second of one spot server of `kind`: 1 / its mean lifetime, estimated
    from a seeded sample as exposure / revocations, a lifetime censored at GCE's 24 h cap (a
    server that lives that long was never revoked while it mattered)."""
    rng = random.Random(f"rate:{kind}")
    lives = [model.sample_lifetime_s(kind, rng) for _ in range(RATE_SAMPLES)]
    revoked = sum(1 for life in lives if life < GCE_MAX_LIFETIME_S)
    exposure = sum(min(life, GCE_MAX_LIFETIME_S) for life in lives)
    return revoked / exposure if revoked and exposure > 0 else 0.0


def profile_step_time(
    micro_batch_size: int, host_s: float, slowdowns: Mapping[str, float], step_overhead_s: float
) -> Callable[[Mapping[str, int], int], float]:
    """(GPUs per kind, global batch) -> seconds per step of a job profiled as `host_s` seconds
    per micro-batch on the fastest kind (x `slowdowns[kind]` on others) plus `step_overhead_s`:
    the shared step-time model (`perf.step_time`: the plan's min-makespan split of
    ceil(batch / micro_batch_size) micro-batches, its makespan, + the overhead). The one step-time
    model of both drivers (`sim.scenario.step_time_model` and the live run). Memoised."""
    memo: dict[tuple, float] = {}

    def step_time(gpus: Mapping[str, int], batch: int) -> float:
        key = (tuple(sorted((k, n) for k, n in gpus.items() if n > 0)), int(batch))
        if key not in memo:
            unknown = [k for k, _ in key[0] if k not in slowdowns]
            if unknown:
                raise UserError(f"no slowdown for device kind {unknown[0]!r}")
            seconds = [host_s * slowdowns[k] for k, n in key[0] for _ in range(n)]
            if not seconds:
                return math.inf
            plan = perf_step_time.split(-(-key[1] // micro_batch_size), seconds)
            memo[key] = perf_step_time.step_seconds(plan, seconds, step_overhead_s)
        return memo[key]

    return step_time


class _Model:
    """The prediction of one decision: every candidate mix is judged against the same input."""

    def __init__(self, inp: ScalerInput, max_servers: int) -> None:
        self.inp = inp
        offered = {(o.kind, o.tier): o for o in inp.offers}
        held = {key: n for key, n in inp.held.items() if n > 0}
        self.keys = sorted(set(offered) | set(held))
        # a held server can be kept even while its offer is gone (an outage): no more of it
        self.caps = tuple(
            min(max_servers, offered[k].quota if k in offered else held[k]) for k in self.keys
        )
        devices = load_devices()
        self.price = tuple(devices.price(kind, tier) for kind, tier in self.keys)
        self.notice = tuple(offered[k].notice_s if k in offered else None for k in self.keys)
        self.startup_s = max((o.startup_s for o in inp.offers), default=0.0)
        self.held = tuple(held.get(k, 0) for k in self.keys)
        self.rate = tuple(
            inp.revocations_per_s(kind) if tier == "spot" else 0.0 for kind, tier in self.keys
        )
        self.batches = remaining_batches(inp.batch, inp.steps_done, inp.steps_total)
        self.batch_now = batch_at(inp.batch, min(inp.steps_done, max(inp.steps_total - 1, 0)))
        self.kinds = sorted({kind for kind, _ in self.keys})
        self.kind_of = tuple(self.kinds.index(kind) for kind, _ in self.keys)
        self._step: dict[tuple, float] = {}
        self._gpus: dict[tuple[int, ...], tuple[float, float, tuple[float, ...]]] = {}
        self._done: dict[tuple[int, ...], tuple[float, float, float]] = {}

    def step_s(self, gpus: Mapping[str, int], batch: int) -> float:
        key = (tuple(sorted((k, n) for k, n in gpus.items() if n > 0)), batch)
        if key not in self._step:
            self._step[key] = self.inp.step_time(dict(key[0]), batch) if key[0] else math.inf
        return self._step[key]

    def per_gpus(self, gpus: tuple[int, ...]) -> tuple[float, float, tuple[float, ...]]:
        """(seconds per step now, seconds of the remaining steps, and per kind the fraction of
        speed lost while one of its GPUs is missing) of a GPU count per kind."""
        if gpus not in self._gpus:
            named = dict(zip(self.kinds, gpus, strict=True))
            step_now = self.step_s(named, self.batch_now)
            compute = sum(n * self.step_s(named, b) for b, n in self.batches)
            fracs = []
            for kind, n in named.items():
                slower = self.step_s({**named, kind: n - 1}, self.batch_now) if n else step_now
                fracs.append(1.0 if math.isinf(slower) else max(0.0, 1 - step_now / slower))
            self._gpus[gpus] = (step_now, compute, tuple(fracs))
        return self._gpus[gpus]

    def predict(self, counts: tuple[int, ...]) -> tuple[float, float, float]:
        """(finish_s, cost_usd, step_s) of a mix (see the module docstring for the model)."""
        found = self._done.get(counts)
        if found is not None:
            return found
        gpus = [0] * len(self.kinds)
        for i, n in enumerate(counts):
            gpus[self.kind_of[i]] += n
        step_s, compute, fracs = self.per_gpus(tuple(gpus))
        lam, joins, leaves, kept, per_hour = 0.0, False, False, 0, 0.0
        for i, (n, h) in enumerate(zip(counts, self.held, strict=True)):
            joins, leaves, kept = joins or n > h, leaves or n < h, kept + min(n, h)
            per_hour += n * self.price[i]
            if n and self.rate[i]:
                lost_step = _in_flight_loss(step_s, self.notice[i])
                loss = (
                    2 * self.inp.change_cost_s + lost_step + self.startup_s * fracs[self.kind_of[i]]
                )
                lam += n * self.rate[i] * loss
        setup = self.startup_s if kept == 0 and compute > 0 else 0.0
        setup += self.inp.change_cost_s * (joins + leaves)
        remaining = compute / (1 - lam) + setup if lam < 1 else math.inf
        cost = self.inp.spent_usd + per_hour * remaining / 3600.0
        self._done[counts] = found = (self.inp.now_s + remaining, cost, step_s)
        return found

    def mix(self, counts: tuple[int, ...]) -> Mix:
        finish_s, cost_usd, step_s = self.predict(counts)
        named = {k: n for k, n in zip(self.keys, counts, strict=True) if n}
        return Mix(named, step_s, finish_s, cost_usd)

    def count_mixes(self, max_servers: int) -> int:
        """How many mixes with 1..max_servers servers fit the caps (a DP over the keys)."""
        ways = [1] + [0] * max_servers
        for cap in self.caps:
            ways = [
                sum(ways[t - j] for j in range(min(cap, t) + 1)) for t in range(max_servers + 1)
            ]
        return sum(ways) - 1

    def all_mixes(self, max_servers: int) -> Iterator[tuple[int, ...]]:
        def rec(i: int, left: int) -> Iterator[tuple[int, ...]]:
            if i == len(self.caps):
                yield ()
                return
            for n in range(min(self.caps[i], left) + 1):
                for rest in rec(i + 1, left - n):
                    yield (n, *rest)

        return (c for c in rec(0, max_servers) if any(c))


Rank = Callable[[float, float], tuple]  # (finish_s, cost_usd) -> sort key


def _in_flight_loss(step_s: float, notice_s: float | None) -> float:
    """Expected seconds of the in-flight step lost to one revocation: it strikes at a uniform
    point u of the step; the step is lost when its rest, (1 - u) x step_s, is longer than the
    notice (none: always), and what is lost is the part done, u x step_s. With a = notice /
    step_s (capped at 1): the integral of u over [0, 1 - a], (1 - a)^2 / 2 x step_s. (The
    simulator and the live run lose it so; counting none with a notice, as before, priced a
    30 s notice against 5-minute steps as if it saved the step.)"""
    if not math.isfinite(step_s):
        return 0.0
    a = 0.0 if notice_s is None else min(1.0, notice_s / step_s) if step_s > 0 else 1.0
    return (1 - a) ** 2 / 2 * step_s


def _moves(i: int, n_keys: int) -> Iterator[tuple[int, ...]]:
    """One step of the local search from key i: add one, remove one, or move one to key j."""
    unit = [tuple(int(k == j) for k in range(n_keys)) for j in range(n_keys)]
    yield unit[i]
    yield tuple(-x for x in unit[i])
    for j in range(n_keys):
        if j != i:
            yield tuple(b - a for a, b in zip(unit[i], unit[j], strict=True))


def _search(model: _Model, max_servers: int, rank: Rank, start: Mix | None = None) -> Mix:
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
        if finish_s <= deadline_s * (1 + _SLACK):
            return (0, cost_usd, finish_s)
        return (1, finish_s, cost_usd)  # none meets it: the fastest

    return rank


def _by_budget(budget_usd: float) -> Rank:
    def rank(finish_s: float, cost_usd: float) -> tuple:
        if cost_usd <= budget_usd * (1 + _SLACK):
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
        model = _Model(inp, self.max_servers)
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
                meets = finish_s <= goal.deadline_s * (1 + _SLACK)
                return meets and cost_usd <= best.cost_usd * margin
            fits = cost_usd <= goal.budget_usd * (1 + _SLACK)
            return fits and finish_s - now_s <= (best.finish_s - now_s) * margin

        return near

    def fastest(self, inp: ScalerInput) -> Mix:
        """The mix predicted to finish first (ties: the cheaper)."""
        return _search(_Model(inp, self.max_servers), self.max_servers, _fastest)


def check_goal(goal: Goal, inp: ScalerInput, max_servers: int = 8) -> None:
    """UserError when the goal cannot be met at all: a deadline before the fastest feasible
    finish (named, with its mix), or a budget that does not pay for one step."""
    model = _Model(inp, max_servers)
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
