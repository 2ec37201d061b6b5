"""The prediction of a mix: how long the rest of a run takes on a mix of servers, and its cost.

A mix is a count per (kind, tier) of servers; `MixModel` judges every candidate mix of one
scaler decision against the same `ScalerInput` (the search and the ranking that choose among
them are `control.scaler`'s). The prediction of the rest of the run:

- compute time: the remaining steps at the forecast global batch (`remaining_batches`,
  `batch_at`), each at the shared step-time model's seconds per step on the mix's GPUs
  (`inp.step_time`: `profile_step_time` below, which both drivers pass in, the simulator
  through `sim.scenario.step_time_model`);
- revocations: a spot server of kind k is revoked at rate r_k (`revocation_rate`); each costs
  its leave and its replacement's join (2 x change_cost_s), the expected part of the in-flight
  step that a notice too short to finish it loses (`_in_flight_loss`), and the replacement's
  start-up at the reduced speed of the mix without it. With lam = sum over spot servers of
  r_k x loss_k, the time lost is the fraction lam of the time spent, so the remaining time is
  compute / (1 - lam) (a mix with lam >= 1 never finishes);
- the move from `held` to the mix, make-before-break as both drivers execute it (`_move`):
  membership changes of change_cost_s each, as the drivers make them (the servers that join
  together one, the members that leave together another, a swap at the bound two), each
  pausing whoever trains then; while the mix's servers still boot (a join's whole start-up, a
  held server's `boot_left_s`) the ready servers train on, the surplus among them included,
  and every one of them is billed, as are the booting ones; at `max_servers` the rest of a
  change of kind goes one server a boot; training on the mix starts when the last has joined,
  and a mix the drivers cannot reach is never chosen;
- cost: what was spent plus each phase's servers' price per hour over its predicted length.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from shoal.cluster.provider import Offer
from shoal.cluster.revocation import GCE_MAX_LIFETIME_S, RevocationModel
from shoal.errors import UserError
from shoal.perf import step_time as perf_step_time
from shoal.perf.devices import load_devices

RATE_SAMPLES = 4000  # lifetimes drawn to estimate a revocation rate
EXACT_BOOTS = 16  # a move's boots whose members' speed is evaluated (the rest: interpolated)


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
    booting: Mapping[tuple[str, str], int] = field(default_factory=dict)  # held, not yet ready
    boot_left_s: float = 0.0  # until the last booting held server is expected ready


def boot_left(requested_s: Iterable[float], startup_s: float, now_s: float) -> float:
    """Seconds until the last of the servers requested at `requested_s` is expected ready,
    each `startup_s` after its request (0 when none is, or each is late): the drivers' estimate
    for `ScalerInput.boot_left_s`, made alike from the start-up the scaler counts."""
    return max([0.0, *(r + startup_s - now_s for r in requested_s)])


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


class MixModel:
    """The prediction of one decision: every candidate mix is judged against the same input."""

    def __init__(self, inp: ScalerInput, max_servers: int) -> None:
        self.inp = inp
        self.max_servers = max_servers
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
        self.ready = tuple(  # the held servers training now (the booting ones are not yet)
            max(0, h - inp.booting.get(k, 0)) for k, h in zip(self.keys, self.held, strict=True)
        )
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

    def gpus_of(self, counts: Sequence[int]) -> tuple[int, ...]:
        """GPUs per kind (in `kinds` order) of a count per (kind, tier) key."""
        gpus = [0] * len(self.kinds)
        for i, n in enumerate(counts):
            gpus[self.kind_of[i]] += n
        return tuple(gpus)

    def predict(self, counts: tuple[int, ...]) -> tuple[float, float, float]:
        """(finish_s, cost_usd, step_s) of a mix (see the module docstring for the model)."""
        found = self._done.get(counts)
        if found is not None:
            return found
        step_s, compute, fracs = self.per_gpus(self.gpus_of(counts))
        lam = 0.0
        for i, n in enumerate(counts):
            if n and self.rate[i]:
                lost_step = _in_flight_loss(step_s, self.notice[i])
                loss = (
                    2 * self.inp.change_cost_s + lost_step + self.startup_s * fracs[self.kind_of[i]]
                )
                lam += n * self.rate[i] * loss
        boot_s, boot_usd, done, paused = self._boot_phase(counts)
        if done >= 1:  # the servers training during the move finish the run
            remaining, cost = boot_s, self.inp.spent_usd + boot_usd
        elif lam < 1:
            after = compute * (1 - done) / (1 - lam) + paused
            remaining = boot_s + after
            cost = self.inp.spent_usd + boot_usd + self._per_hour(counts) * after / 3600.0
        else:
            remaining = cost = math.inf
        self._done[counts] = found = (self.inp.now_s + remaining, cost, step_s)
        return found

    def _boot_phase(self, counts: tuple[int, ...]) -> tuple[float, float, float, float]:
        """(seconds, USD, fraction of the remaining work done, seconds of membership changes
        still to pause the mix) until the drivers have moved to the mix `counts`,
        make-before-break as they execute it (`_move`), or until the servers training meanwhile
        finish the run (then the fraction is 1); (inf, inf, 0, 0) when the drivers cannot reach
        the mix (at `max_servers` the last member is never released). A change pauses whoever
        trains when it happens: a swap's leave its boot, the last join the mix."""
        move = self._move(counts)
        if move is None:
            return math.inf, math.inf, 0.0, 0.0
        boots, changes_at_end = move
        seconds = usd = done = paused = 0.0  # paused: change seconds not yet waited
        for wait, rate, per_hour, changes in boots:
            paused += changes * self.inp.change_cost_s
            train = max(0.0, wait - paused)
            if done + train * rate >= 1:  # the members finish before the boot ends
                need = wait - train + (1 - done) / rate
                return seconds + need, usd + per_hour * need / 3600.0, 1.0, 0.0
            paused = max(0.0, paused - wait)
            seconds, usd, done = seconds + wait, usd + per_hour * wait / 3600.0, done + train * rate
        return seconds, usd, done, paused + changes_at_end * self.inp.change_cost_s

    def _move(self, counts: tuple[int, ...]) -> tuple[list[tuple], int] | None:
        """The boots of a move from the held servers to `counts`, as both drivers execute it
        (`sim.replay`'s `fill` and `shrink`, `launcher.autoscale`'s `_fill` and `_shrink`):
        surplus servers still booting are released at once and the missing ones requested, in
        key order, up to `max_servers` held; the surplus members leave once nothing boots, one
        at a time, each followed by a request: at the bound a change of kind goes one server a
        boot. The last member is never released (None: the mix is out of reach). Per boot:
        (seconds, the fraction of the remaining work its members do per second, USD per hour
        of the servers held meanwhile, membership changes at its start). The first boot lasts
        the last server's start-up (a join's `startup_s`, a kept booting server's
        `boot_left_s`), the others `startup_s`. With them, the changes once the last server has
        joined. The changes, as the drivers make them: the first boot's joins (one), a swap's
        leave and its server's join (one each), the surplus members that leave together once
        the last has joined (one)."""
        ready = list(self.ready)
        booting = [  # the held servers booting that the mix keeps (surplus ones go first)
            min(h - r, max(0, n - r)) for n, h, r in zip(counts, self.held, self.ready, strict=True)
        ]
        wait = self.inp.boot_left_s if any(booting) else 0.0
        if self._request(counts, ready, booting):
            wait = max(wait, self.startup_s)
        members = [r + b for r, b in zip(ready, booting, strict=True)]  # once these have booted
        boots = [(wait, self._rate(ready), self._per_hour(members), 0)] if wait > 0 else []
        leave = [
            i for i, (m, n) in enumerate(zip(members, counts, strict=True)) for _ in range(m - n)
        ]
        join = [
            i for i, (m, n) in enumerate(zip(members, counts, strict=True)) for _ in range(n - m)
        ]
        if join and sum(members) <= 1:
            return None
        joined = int(any(booting))  # the first boot's joins: a change when it ends
        boots += self._swaps(members, leave, join, joined)
        # then the last swap's join (or the first boot's) and the surplus members' leave
        return boots, (1 if join else joined) + int(len(leave) > len(join))

    def _swaps(self, members: list[int], leave: list[int], join: list[int], joined: int) -> list:
        """The boots of the swaps at the bound: in the t-th, the member of key `leave[t]` has
        gone and the server of key `join[t]` boots; it starts with that leave and the join
        before it (the first boot's, `joined`, for the first swap). The members' rate is
        evaluated for the first `EXACT_BOOTS` swaps and the last, and taken on the line between
        them in the middle (one step-time evaluation a swap made a decision at 1,000 servers
        take 16 s)."""

        if not join:
            return []

        def at(t: int) -> list[int]:
            now = list(members)
            for i in leave[: t + 1]:
                now[i] -= 1
            for i in join[:t]:
                now[i] += 1
            return now

        last = len(join) - 1
        exact = {t: self._rate(at(t)) for t in (*range(min(EXACT_BOOTS, last + 1)), last)}
        first = min(EXACT_BOOTS, last + 1) - 1
        per_hour = self._per_hour(members) - self.price[leave[0]]
        out = []
        for t, i in enumerate(join):
            if t > 0:
                per_hour += self.price[join[t - 1]] - self.price[leave[t]]
            if t in exact:
                rate = exact[t]
            else:  # between the last exact swap and the last one
                rate = exact[first] + (exact[last] - exact[first]) * (t - first) / (last - first)
            out.append((self.startup_s, rate, per_hour + self.price[i], (1 if t else joined) + 1))
        return out

    def _rate(self, members: Sequence[int]) -> float:
        """The fraction of the remaining work `members` (a count per key) do per second."""
        compute = self.per_gpus(self.gpus_of(members))[1]
        return 1 / compute if compute else math.inf  # compute inf: nobody trains, 0

    def _per_hour(self, counts: Sequence[int]) -> float:
        return sum(n * p for n, p in zip(counts, self.price, strict=True))

    def _request(self, counts, ready: list[int], booting: list[int]) -> bool:
        """Request the missing servers of `counts`, in key order, within `max_servers` held
        (in place); whether any was requested."""
        room, asked = self.max_servers - sum(ready) - sum(booting), 0
        for i, n in enumerate(counts):
            more = max(0, min(n - ready[i] - booting[i], room - asked))
            booting[i] += more
            asked += more
        return asked > 0

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
