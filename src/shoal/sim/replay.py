"""The scenario replay: one run of one job on the emulated provider, driven by the scaler.

`simulate(scenario)` replays a `Scenario` (`scenario.py`: the record a live run writes) with
the SAME `Scaler`, the SAME provider (so the same requests meet the same revocations) and the
SAME step-time model as the live run.

The event loop, in emulated seconds: training advances continuously at 1 / step_s steps per
second on the joined servers (step_s from `step_time_model` at the current batch), and not at
all while a membership change is under way. A change (a join after the server's start-up, a
leave, a revocation) pauses training for change_cost_s; joins at one instant are one change,
as are leaves, but a join and the leaves it lets go are two (live, the group re-forms with the
newcomers, then the leavers go at a step boundary). A
revocation with notice takes the server out at the notice, losing nothing else; without notice
the in-flight (partial) step is lost too; so it is with a notice shorter than the rest of the
step, and the survivors also lose the time to the revocation (they compute the doomed step
until the server is killed). The scaler re-decides every scale_every_s, on each revocation and
at each batch change (and, after a refused request, as soon as a revocation frees quota: a
noticed server holds its slot until it is gone); with `autoscale` off the initial mix is held
and a revoked server is replaced by one of the same (kind, tier). When no server is left, the
run falls back to the last durable checkpoint -- written every `checkpoint_every_s` at
the step reached then, and by the last worker as it leaves when it had a notice (as the live
runtime does) -- and resumes when capacity returns. `restart_from_checkpoint` models SkyPilot's
managed spot strategy instead: any revocation tears the whole set down and restarts the job from
the last periodic checkpoint on a fresh set. Billing goes through `cluster.ledger.CostLedger`,
per second from request to release or revocation, one account per kind.

A target mix is executed make-before-break, as live (`_fill`, `_shrink` in `autoscale.py`):
missing servers are requested at once (within max_servers; a noticed server does not count),
surplus ones still booting released at once, and surplus members (newest first) leave, at one
step boundary live and here at the last join, once none of the staying servers boots, never
the last member: until then they are held, billed, train. A leave is followed by a fill: a
swap at max_servers goes one server at a time.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from shoal.cluster.ledger import CostLedger
from shoal.cluster.provider import Lease, provider_from_config
from shoal.control.mix_model import ScalerInput, batch_at, boot_left, revocation_rate
from shoal.control.scaler import Goal, Scaler, check_goal
from shoal.errors import UserError
from shoal.sim.replay_result import ScenarioResult
from shoal.sim.scenario import Scenario, initial_counts, join_delay_at, step_time_model

HORIZON_S = 30 * 86400.0  # emulated time after which a run that has not finished is an error
MAX_EVENTS = 2_000_000  # a loop guard: no sane scenario handles this many events


@dataclass
class _Server:
    lease: Lease
    joined: bool = False
    leaving: bool = False  # revoked (noticed) or released: out of the membership for good


class _Run:
    """The state of one simulated run; `run()` is the event loop."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.provider = provider_from_config(sc.provider)
        self.step_time = step_time_model(sc)
        self.scaler = Scaler(Goal(**sc.goal), sc.max_servers) if sc.autoscale else None
        self.rates = {k: revocation_rate(self.provider.model(k), k) for k in self.provider.kinds}
        self.ledger = CostLedger()
        self.want = initial_counts(sc)  # the held mix when autoscale is off
        self.target: dict[tuple[str, str], int] = {}  # the mix `apply` moves to
        self.servers: dict[str, _Server] = {}  # held or leaving until revoked
        self.heap: list[tuple[float, int, str, str]] = []
        self.t = self.progress = self.busy_until = 0.0
        self.last_change: tuple[float, str] = (-1.0, "")  # when, and "join" or "leave"
        self.ckpt_step = 0
        self.revocations = self.changes = self.seq = 0
        self.lost = 0.0
        self.short = False  # a request was refused: retry as soon as a server is revoked
        self.events: list[dict] = []

    # -- bookkeeping ---------------------------------------------------------------------------
    def push(self, t: float, what: str, server: str = "") -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, what, server))

    def log(self, event: str, **extra: object) -> None:
        self.events.append({"t_s": self.t, "event": event, **extra})

    def members(self) -> Counter:
        out: Counter = Counter()
        for s in self.servers.values():
            if s.joined:
                out[s.lease.kind] += 1
        return out

    def held(self) -> Counter:
        return Counter((s.lease.kind, s.lease.tier) for s in self.servers.values() if not s.leaving)

    def spent(self) -> float:
        open_usd = sum(
            s.lease.usd_per_hour * (self.t - s.lease.requested_s) / 3600.0
            for s in self.servers.values()
            if self.ledger.is_open(s.lease.server)
        )
        return self.ledger.total_usd + open_usd

    def change(self, what: str) -> None:
        """One membership change, a "join" or a "leave": training pauses change_cost_s (one
        for what joins, or leaves, at one instant)."""
        if (self.t, what) != self.last_change:
            self.busy_until = max(self.busy_until, self.t) + self.sc.change_cost_s
            self.changes += 1
            self.last_change = (self.t, what)

    # -- the mix -------------------------------------------------------------------------------
    def acquire(self, kind: str, tier: str, ready_now: bool = False) -> bool:
        """Request a server; `ready_now`: it is a member at once (a live run's --workers, whose
        clock starts when they have formed their group), else it joins after its start-up."""
        lease = self.provider.request(kind, tier, self.t)
        if lease is None:
            self.log("no_capacity", kind=kind, tier=tier)
            self.short = True
            return False
        self.servers[lease.server] = _Server(lease, joined=ready_now)
        self.ledger.open(lease.server, kind, lease.usd_per_hour, self.t)
        self.log(
            "request",
            server=lease.server,
            kind=kind,
            tier=tier,
            usd_per_hour=lease.usd_per_hour,
            ready_s=lease.ready_s,
        )
        if not ready_now:
            self.push(max(lease.ready_s, self.t + self.sc.join_delay_s), "ready", lease.server)
        if math.isfinite(lease.revoke_at_s):
            leave_s = lease.revoke_at_s - (lease.notice_s or 0.0)
            self.push(max(leave_s, self.t), "leave", lease.server)
            self.push(lease.revoke_at_s, "revoke", lease.server)
        return True

    def release(self, server: str) -> None:
        s = self.servers.pop(server)
        self.ledger.close(server, self.t)
        self.provider.release(server, self.t)
        self.log("close", server=server, cause="released")
        if s.joined:
            self.change("leave")

    def apply(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Move from the held mix to the target `counts`, make-before-break (see above)."""
        self.target = dict(counts)
        self.fill()
        self.shrink()

    def fill(self) -> None:
        """Request what the target lacks, within max_servers; stop a kind at a refusal."""
        held = self.held()
        for key, n in sorted(self.target.items()):
            for _ in range(n - held[key]):
                if sum(not s.leaving for s in self.servers.values()) >= self.sc.max_servers:
                    return
                if not self.acquire(*key):
                    break

    def surplus(self) -> list[_Server]:
        """The held servers the target does not want, per (kind, tier) the cheapest to lose
        first: booting, then the newest. A noticed server is not held: it goes at its revocation."""
        held, out = self.held(), []
        staying = [s for s in self.servers.values() if not s.leaving]
        staying.sort(key=lambda s: (s.joined, -s.lease.requested_s, s.lease.server))
        for key in sorted(held):
            mine = [s for s in staying if (s.lease.kind, s.lease.tier) == key]
            out += mine[: max(0, held[key] - self.target.get(key, 0))]
        return out

    def shrink(self) -> None:
        """Release the surplus: booting servers at once, members once none boots (see above)."""
        for booting in [s for s in self.surplus() if not s.joined]:
            self.release(booting.lease.server)
        while not any(not s.joined and not s.leaving for s in self.servers.values()):
            surplus = self.surplus()
            if not surplus or sum(self.members().values()) <= 1:
                return
            self.release(surplus[0].lease.server)
            self.fill()

    def counted_delay(self) -> float:
        """The join delay the live scaler counted at this time (see `Scenario.join_delays`)."""
        if not self.sc.join_delays:
            return self.sc.join_delay_s
        return join_delay_at(self.sc.join_delays, self.t)

    def scaler_input(self) -> ScalerInput:
        startup_s = max(self.provider.startup_s, self.counted_delay())  # as the live run's
        offers = [replace(o, startup_s=startup_s) for o in self.provider.offers(self.t)]
        booting = [s for s in self.servers.values() if not s.joined and not s.leaving]
        return ScalerInput(
            now_s=self.t,
            steps_done=int(self.progress),
            steps_total=self.sc.steps,
            batch=self.sc.batch,
            step_time=self.step_time,
            offers=offers,
            held=self.held(),
            spent_usd=self.spent(),
            change_cost_s=self.sc.change_cost_s,
            revocations_per_s=self.rates.__getitem__,
            booting=Counter((s.lease.kind, s.lease.tier) for s in booting),
            boot_left_s=boot_left([s.lease.requested_s for s in booting], startup_s, self.t),
        )

    def decide(self, why: str) -> None:
        self.short = False
        if not self.sc.autoscale:
            self.apply(self.want)
            return
        inp = self.scaler_input()
        if not inp.offers and not inp.held:
            self.log("no_capacity", why=why)
            return
        mix = self.scaler.decide(inp)
        extra = {"finish_s": mix.finish_s, "usd": mix.cost_usd}
        extra |= self.scaler.goal.misses(mix.cost_usd, mix.finish_s)  # a fallback's
        self.log("decide", why=why, mix=mix.describe(), **extra)
        self.apply(mix.counts)

    # -- events --------------------------------------------------------------------------------
    def on_ready(self, server: str) -> None:
        s = self.servers.get(server)
        if s is None or s.leaving:
            return  # released or revoked while it booted
        s.joined = True
        self.log("join", server=server)
        self.change("join")
        self.shrink()  # the last of the target to boot: the surplus members leave now

    def rollback(self, to_step: int) -> None:
        """Resume from the durable checkpoint at `to_step`: what came after it is lost."""
        if self.progress > to_step:
            self.lost += self.progress - to_step
            self.log("rollback", from_step=self.progress, to_step=to_step)
            self.progress = float(to_step)

    def on_leave(self, server: str) -> None:
        """A revocation reaches the run: at the notice, or at the revocation without one."""
        s = self.servers.get(server)
        if s is None or s.leaving:
            return
        in_flight_lost = s.joined and self._notice_too_short(s.lease.notice_s)
        s.leaving, was_member = True, s.joined
        s.joined = False
        self.revocations += 1
        self.log("revoke", server=server, notice=s.lease.notice_s is not None)
        if self.sc.restart_from_checkpoint:
            self.restart(s)
            return
        if was_member:
            if in_flight_lost:  # the in-flight step dies with the server
                self.rollback(math.floor(self.progress))
                # and with a notice the survivors compute it until the server is killed
                self.busy_until = max(self.busy_until, self.t + (s.lease.notice_s or 0.0))
            self.change("leave")
            if not self.members():
                if s.lease.notice_s is not None:  # the last worker checkpoints as it leaves
                    self.ckpt_step = max(self.ckpt_step, math.floor(self.progress))
                self.rollback(self.ckpt_step)
        self.decide("revocation")

    def _notice_too_short(self, notice_s: float | None) -> bool:
        """Whether a revoked member cannot finish the in-flight step before it goes: no
        notice, or less notice than the rest of the step (as a live worker, killed at the
        notice's deadline, loses it)."""
        if notice_s is None:
            return True
        step = math.floor(self.progress)
        step_s = self.step_time(self.members(), batch_at(self.sc.batch, step))
        return (math.ceil(self.progress) - self.progress) * step_s > notice_s

    def restart(self, revoked: _Server) -> None:
        """SkyPilot's managed spot: tear the set down, restart from the last checkpoint on a
        fresh set of the same mix."""
        again = self.held() + Counter([(revoked.lease.kind, revoked.lease.tier)])
        for server in [k for k, s in self.servers.items() if not s.leaving]:
            self.release(server)
        self.rollback(self.ckpt_step)
        self.log("restart", mix=dict((f"{k}:{t}", n) for (k, t), n in sorted(again.items())))
        if self.sc.autoscale:
            self.decide("restart")
        else:
            self.apply(again)

    def on_revoke(self, server: str) -> None:
        if server in self.servers:  # billed until now, the revocation itself
            self.on_leave(server)
            del self.servers[server]
            self.ledger.close(server, self.t)
            self.log("close", server=server, cause="revoked")
            if self.short:  # the revoked server held quota a refused request was waiting for
                self.decide("capacity")

    def on_checkpoint(self, _: str = "") -> None:
        if self.members():
            self.ckpt_step = math.floor(self.progress)
        self.push(self.t + self.sc.checkpoint_every_s, "checkpoint")

    def on_tick(self, _: str = "") -> None:
        self.decide("interval")
        self.push(self.t + self.sc.scale_every_s, "tick")

    # -- the loop ------------------------------------------------------------------------------
    def next_boundary(self) -> tuple[float, int, float]:
        """(time, step, seconds per step) of the next batch change or the run's end."""
        members = self.members()
        step = math.floor(self.progress)
        later = [a for a, _ in self.sc.batch if a > step and a < self.sc.steps]
        boundary = min(later, default=self.sc.steps)
        step_s = self.step_time(members, batch_at(self.sc.batch, step)) if members else math.inf
        start = max(self.t, self.busy_until)
        return start + (boundary - self.progress) * step_s, boundary, step_s

    def advance(self, t: float, step_s: float, boundary: int) -> None:
        start = max(self.t, self.busy_until)
        if t > start and math.isfinite(step_s):
            self.progress = min(float(boundary), self.progress + (t - start) / step_s)
        self.t = t

    def check_goal(self) -> None:
        """As the live run does before it starts: an impossible goal is an error."""
        if self.sc.autoscale:
            check_goal(self.scaler.goal, self.scaler_input(), self.sc.max_servers)

    def run(self) -> ScenarioResult:
        self.check_goal()
        if self.sc.initial_ready:
            for (kind, tier), n in sorted(initial_counts(self.sc).items()):
                for _ in range(n):
                    self.acquire(kind, tier, ready_now=True)
        self.decide("start")
        self.push(self.sc.scale_every_s, "tick")
        self.push(self.sc.checkpoint_every_s, "checkpoint")
        horizon = max(HORIZON_S, 10 * self.sc.goal.get("deadline_s", 0.0))
        handlers = {"ready": self.on_ready, "leave": self.on_leave, "revoke": self.on_revoke}
        handlers |= {"tick": self.on_tick, "checkpoint": self.on_checkpoint}
        for _ in range(MAX_EVENTS):
            t_b, boundary, step_s = self.next_boundary()
            if t_b <= self.heap[0][0]:
                self.advance(t_b, step_s, boundary)
                self.progress = float(boundary)
                if boundary >= self.sc.steps:
                    return self.finish()
                self.decide("batch")
                continue
            t, _, what, server = heapq.heappop(self.heap)
            if t > horizon:
                break
            self.advance(t, step_s, boundary)
            handlers[what](server)
        else:  # the loop guard, long before the horizon (it said "does not finish in 30 days")
            raise UserError(
                f"scenario: {MAX_EVENTS:,} events in {self.t:.3g} s of emulated time, at step "
                f"{self.progress:.0f} of {self.sc.steps} (scale_every_s "
                f"{self.sc.scale_every_s:g}, checkpoint_every_s {self.sc.checkpoint_every_s:g})"
            )
        raise UserError(
            f"scenario: the run does not finish within {horizon / 86400:.0f} days of emulated "
            f"time (step {self.progress:.0f} of {self.sc.steps}; no capacity?)"
        )

    def finish(self) -> ScenarioResult:
        for server in list(self.servers):
            if self.ledger.is_open(server):
                self.ledger.close(server, self.t)
                self.log("close", server=server, cause="end")
        self.log("end", step=self.sc.steps)
        end = self.scaler.goal.misses(self.ledger.total_usd, self.t) if self.scaler else {}
        return ScenarioResult(
            time_s=self.t,
            cost_usd=self.ledger.total_usd,
            revocations=self.revocations,
            changes=self.changes,
            cost_by_kind=dict(sorted(self.ledger.usd_by_account.items())),
            events=tuple(self.events),
            lost_steps=self.lost,
            **end,  # a fixed mix has no goal (live, the goal is the autoscaler's)
        )


def check_scenario_goal(sc: Scenario) -> None:
    """UserError when the scenario's goal cannot be met at all (what `simulate` checks first)."""
    _Run(sc).check_goal()


def simulate(sc: Scenario) -> ScenarioResult:
    """Run the scenario to its last step (UserError if it cannot finish within the horizon)."""
    return _Run(sc).run()
