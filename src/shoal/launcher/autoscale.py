"""The live autoscaler of `shoal run --provider local`: leases, revocations, the scaler's mix.

The controller (`supervisor.py`) calls one `Driver` once per poll. The driver holds one worker
per ready lease of the servers bought from the provider (`shoal.cluster.provider`), and turns
what the provider and the scaler decide into the controller's own events:
- a spot lease's revocation becomes a notice `notice_s / time_scale` wall seconds before it
  (the worker leaves at the next step boundary, handing nothing over), or a kill at `revoke_at`
  when the provider gives no notice; a revoked server is billed until its revocation;
- a requested lease becomes a worker (`add KIND`) once it is ready (`ready_s`);
- the scaler's target mix (`control.scaler`, autoscaling only) becomes requests, and graceful
  leaves of the cheapest workers to lose (servers still booting first, then the newest
  workers) once every requested server has joined: make before break, so the group never
  waits on a boot with fewer workers than it had. Without `--autoscale` the `--workers` mix is
  held, each revoked server replaced by one of the same kind and tier.
It re-decides every `--scale-every` emulated seconds, on each revocation, when a request finds
no capacity (the next decision sees what is offered now: another kind, or on-demand) and when
the global batch in the step lines changes. When every worker is gone (every spot server
revoked at once) the run waits for capacity, requesting again each poll, and the new workers
continue from the newest durable checkpoint, in the same `shoal run`. Workers that fail on
their own (a crash, not a revocation) are replaced by the scaler too, but not forever: after
twice as many failures as the run started with workers, with no step trained in between, it
buys nothing more and the run fails once its last worker is gone (a job that crashes at a
step would otherwise be bought servers until the lease bound, as torchrun's --max-restarts
bounds its restarts).

Time: emulated seconds = wall seconds x `time_scale`, counted from the moment the first group
forms (the initial servers are billed from 0 and are ready then). The driver's parts, a module
each: the lease book (`leases.py`: the worker on each server, billing, the lease and cost
lines), what the run measures of itself (`measured.py`), the scaler's input and the replay's
`OUT/scenario.json` made of those measurements (`runmodel.py`), what is said of a goal out of
reach (`goalwatch.py`), and `--recovery restart` (`restart.py`).
"""

from __future__ import annotations

import pathlib
import time
from collections import Counter

from shoal.cluster.provider import provider_from_config
from shoal.control.mix_model import Mix
from shoal.control.scaler import Goal, Scaler, check_goal
from shoal.launcher.events import Event
from shoal.launcher.goalwatch import GoalWatch
from shoal.launcher.leases import LeaseBook, lease_label
from shoal.launcher.measured import Measurements
from shoal.launcher.restart import Restarts
from shoal.launcher.runmodel import RunModel
from shoal.metrics.files import SCENARIO_FILE
from shoal.metrics.training import MembershipEvent, StepLine
from shoal.runtime.outputs import write_json_atomic
from shoal.sim.scenario import Scenario

STRAGGLE_S = 10.0  # wall seconds a leaver left out of the new group may take to exit
FAILURES_PER_WORKER = 2  # own failures per initial worker, without a step trained, tolerated


class Driver:
    """The provider's leases and the scaler's decisions inside the controller's loop."""

    def __init__(self, spec, speeds, host_s: float | None, job, ctl=None) -> None:
        self.spec, self.speeds = spec, speeds
        self.cfg = cfg = spec.config.provider
        self.scale = cfg.time_scale
        self.provider = provider_from_config(cfg)
        self.book = LeaseBook(self.provider, spec.config.out, spec.config.resume)
        self.ctl = ctl  # None for the launch check
        self.offset_s = self.book.offset_s  # a resumed run's clock goes on from the last one
        self.stragglers: dict[str, float] = {}  # worker -> wall time its server was released
        initial = self._initial_counts()
        self.want = dict(initial)  # (kind, tier) -> servers held
        goal = cfg.autoscale and Goal(deadline_s=cfg.deadline_s, budget_usd=cfg.budget_usd)
        self.scaler = Scaler(goal, cfg.max_servers) if goal else None
        self.watch = GoalWatch(self.scaler.goal if self.scaler else None)
        self.redecide, self.next_decision_s = True, 0.0
        self.mix: Mix | None = None
        self.measured = Measurements(
            self.scale, speeds.slowdown, job.micro_batch_size, job.global_batch_size, host_s,
            cfg.startup_s,
        )  # fmt: skip
        self.model = RunModel(spec, speeds, self.provider, self.measured, self.book, initial)
        self.started: float | None = None  # wall time the emulated clock started
        self.last_step_s: float | None = None  # emulated time the last step line was written
        self.gave_up_after_s = max(cfg.scale_every_s, 3600.0) * 6
        self.alone_since_s: float | None = None  # emulated time the last worker went
        self.restarts = Restarts(spec.config, self.book) if cfg.recovery == "restart" else None
        self.failures = (0, 0)  # (step, workers failed on their own since it was trained)
        self.gave_up = False  # no more servers: the workers kept failing without progress

    @property
    def ctl(self):
        """The controller (None for the launch check); the lease book writes to its metrics."""
        return self.book.ctl

    @ctl.setter
    def ctl(self, ctl) -> None:
        self.book.ctl = ctl

    def now(self) -> float:
        """Emulated seconds since the first group formed (0 before): a local worker's process
        start-up (importing torch) is an artefact of the emulation, not a boot (`--startup`)."""
        if self.started is None and self.ctl.members:
            self.started = time.time()
        since = 0.0 if self.started is None else (time.time() - self.started) * self.scale
        return self.offset_s + since

    def _tiers(self) -> list[str]:
        return self.spec.tiers or ["on_demand"] * len(self.spec.kinds)

    def _initial_counts(self) -> dict[tuple[str, str], int]:
        return dict(sorted(Counter(zip(self.spec.kinds, self._tiers(), strict=True)).items()))

    def open_initial(self) -> None:
        """The --workers servers, requested at launch for the workers the controller starts."""
        self.book.open_initial(self.spec.kinds, self._tiers())

    # -- the poll -------------------------------------------------------------------------
    def tick(self) -> None:
        now = self.now()
        if self.ctl.steps_done >= self.spec.config.steps:
            return  # trained: nothing more to buy while the workers write their results
        if self.started is None:  # nothing is decided before the first group trains, but a
            self._departures(now)  # worker that failed starting frees its server
            return
        if any(w.state in ("member", "leaving") for w in self.ctl.workers.values()):
            self.alone_since_s = None  # the give-up bound counts from the last member's end
        elif self.alone_since_s is None:
            self.alone_since_s = now
        elif now - self.alone_since_s > self.gave_up_after_s and not self.gave_up:
            # replacements revoked while they boot, again and again: a worker still starting
            # kept the run alive, and it bought server after server (2,800 in 5 minutes)
            self.gave_up, self.want = True, {}
            self.ctl.say(f"no worker trained for {now - self.alone_since_s:.0f} s: buying no more")
        self._revocations(now)
        self._departures(now)
        if self.gave_up:
            return
        measured = self.measured.ready or not self.ctl.members
        if self.scaler and measured and (self.redecide or now >= self.next_decision_s):
            self._decide(now)
        elif not self.scaler and now >= self.next_decision_s:
            # a fixed mix's spend, every --scale-every too: a resume after a hard kill bills
            # the open leases up to the last time seen, which was their open (billed at $0)
            self.next_decision_s = now + self.cfg.scale_every_s
            self.cost_line(now, None)
        self._fill(now)
        self._shrink()

    def _state(self, server: str) -> str:
        """Its worker's state: starting (booting), member, leaving; gone (or none)."""
        w = self.ctl.workers.get(self.book.worker_of.get(server, ""))
        return "gone" if w is None or w.proc.poll() is not None else w.state

    def _revocations(self, now: float) -> None:
        book = self.book
        for server, lease in list(book.leases.items()):
            if server not in book.leases:
                continue  # released by a restart earlier in this loop
            wid, state = book.worker_of.get(server), self._state(server)
            if self.restarts and now >= lease.revoke_at_s:
                self.restarts.revoked(server, now, self._state)
                continue
            warn_at = lease.revoke_at_s - (lease.notice_s or 0.0)
            # restart ignores the notice: the job is stopped at the revocation, as a managed
            # spot job is when its cluster is preempted
            noticed = server in book.noticed or self.restarts is not None
            if lease.notice_s is not None and now >= warn_at and not noticed:
                # the scaler weighs the mix without it now, as the simulator does at a notice:
                # filling the last target instead re-bought a server the scaler would let go
                book.noticed.add(server)
                self.redecide = True
                if state in ("member", "leaving") and server not in book.leaving:
                    deadline = lease.notice_s / self.scale
                    self.ctl.pending.append(
                        Event("notice", at_s=0.0, worker=wid, deadline_s=deadline)
                    )
            if now >= lease.revoke_at_s:
                # no notice, or a server revoked while booting: its worker is killed
                if state == "starting" or (state != "gone" and lease.notice_s is None):
                    self.ctl.pending.append(Event("kill", at_s=0.0, worker=wid))
                self.ctl.say(f"server {server} ({wid}) revoked")
                book.revocations += 1
                book.close(server, lease.revoke_at_s, "revoked")
                self.redecide = self.redecide or lease.notice_s is None

    def admissible(self, wid: str) -> bool:
        """A worker joins once its server is ready: its process starts at the request, so its
        own start-up overlaps the emulated boot instead of adding to it."""
        lease = self.book.leases.get(self.book.server_of.get(wid, ""))
        return lease is None or self.now() >= lease.ready_s

    def _departures(self, now: float) -> None:
        """A worker that left or failed frees its server (a noticed one ends as revoked). A
        fixed mix replaces revoked servers only: a worker that failed on its own (a crash, an
        injected kill) would likely fail again, and the run must be able to end."""
        self._dropped_leavers(now)
        book = self.book
        for server in list(book.leases):
            wid = book.worker_of.get(server)
            if wid and self.ctl.workers[wid].state == "gone":
                revoked = server in book.noticed
                key = (book.leases[server].kind, book.leases[server].tier)
                failed = not (revoked or server in book.leaving)
                if failed and not self.scaler:
                    self.want[key] = max(0, self.want.get(key, 0) - 1)
                if failed:
                    self._failed()
                book.revocations += revoked
                book.close(server, now, "revoked" if revoked else "released")

    def _failed(self) -> None:
        """Count a worker that failed on its own; give up buying after too many in a row."""
        step, n = self.failures
        step, n = (step, n + 1) if step == self.ctl.steps_done else (self.ctl.steps_done, 1)
        self.failures = (step, n)
        if n >= FAILURES_PER_WORKER * len(self.spec.kinds) and not self.gave_up:
            self.gave_up, self.want = True, {}
            self.ctl.say(f"{n} workers failed at step {step}, none trained a step: buying no more")

    def _dropped_leavers(self, now: float) -> None:
        """A worker asked to leave whose group has re-formed without it no longer trains: its
        server is released now. Its process normally exits at once; one that does not (several
        leaves announced at different steps can leave one waiting) is killed after
        STRAGGLE_S, so that it is neither billed nor left running to the end."""
        members, book = set(self.ctl.members), self.book
        for server in [s for s in book.leaving if s in book.leases]:
            wid = book.worker_of[server]
            if members and wid not in members and self.ctl.workers[wid].state == "leaving":
                book.close(server, now, "released")
                self.stragglers[wid] = time.time()
        for wid, since in list(self.stragglers.items()):
            w = self.ctl.workers[wid]
            if w.proc.poll() is not None or w.state == "gone":
                del self.stragglers[wid]
            elif time.time() - since > STRAGGLE_S:
                self.ctl.pending.append(Event("kill", at_s=0.0, worker=wid))
                del self.stragglers[wid]

    def _fill(self, now: float) -> None:
        """Request what the target mix lacks; no capacity: decide again with what is offered."""
        book = self.book
        held = book.held()
        for key, n in sorted(self.want.items()):
            for _ in range(n - held.get(key, 0)):
                # a noticed server is gone within its notice: its replacement may boot now
                if sum(s not in book.noticed for s in book.leases) >= self.cfg.max_servers:
                    return
                lease = self.provider.request(key[0], key[1], now)
                if lease is None:
                    self.redecide = True
                    break
                w = self.ctl.spawn(lease.kind)
                book.bind(lease.server, w.id)
                book.open(lease)
                self.ctl.say(
                    f"requested {lease.server}: starting {w.id} ({lease.kind} {lease.tier})"
                )

    def _shrink(self) -> None:
        """Leave the servers the target mix no longer wants: booting ones at once (released),
        then, once every requested server has joined, the newest workers (graceful leaves)."""
        book, leases = self.book, self.book.leases
        staying = self._staying()
        booting = [s for s in staying if self._state(s) == "starting"]
        for key, n in sorted(book.held().items()):
            extra = n - self.want.get(key, 0)
            mine = [
                s for s in staying if s in leases and (leases[s].kind, leases[s].tier) == key
            ]  # fmt: skip
            for server in sorted(mine, key=self._loss_order)[: max(extra, 0)]:
                wid = book.worker_of[server]
                if server in booting:
                    self.ctl.pending.append(Event("kill", at_s=0.0, worker=wid))
                    book.close(server, self.now(), "released")
                elif not booting and self._members_left() > 1:
                    book.leaving.add(server)
                    self.ctl.pending.append(Event("leave", at_s=0.0, worker=wid))
                    booting = ["wait"]  # one leave per poll: the group regroups once each

    def _staying(self) -> list[str]:
        """The servers held and staying: neither noticed nor leaving (`LeaseBook.held`'s)."""
        book = self.book
        return [s for s in book.leases if s not in book.noticed and s not in book.leaving]

    def _loss_order(self, server: str) -> tuple[int, int]:
        """Booting servers first, then the most recently started workers."""
        booting = self._state(server) == "starting"
        return (0 if booting else 1, -int(self.book.worker_of[server][1:]))

    def _members_left(self) -> int:
        book = self.book
        return sum(
            1
            for s, w in book.worker_of.items()
            if s in book.leases and s not in book.leaving and s not in book.noticed
            and self.ctl.workers[w].state == "member"
        )  # fmt: skip

    # -- the scaler -----------------------------------------------------------------------
    def scenario(self) -> Scenario:
        """This run, for `shoal simulate --scenario` (`runmodel.py`)."""
        done = getattr(self.ctl, "steps_done", 0)
        trained_s = None if self.last_step_s is None else self.last_step_s - self.offset_s
        return self.model.scenario(done, trained_s)

    def check(self) -> None:
        """Before any worker starts: the goal must be reachable (one line, exit 2, if not), at
        the launcher's timing of the job on this host (`hostspeed.py`); and the --workers
        servers must be there to buy."""
        self.book.check_initial(self.spec.kinds, self._tiers())
        if self.scaler:
            check_goal(self.scaler.goal, self.model.scaler_input(0.0, 0), self.scaler.max_servers)

    def _decide(self, now: float) -> None:
        periodic = now >= self.next_decision_s
        self.redecide = False
        if periodic:
            self.next_decision_s = now + self.cfg.scale_every_s
        booting = [s for s in self._staying() if self._state(s) == "starting"]
        mix = self.scaler.decide(self.model.scaler_input(now, self.ctl.steps_done, booting))
        changed = self.mix is None or mix.counts != self.mix.counts
        self.mix = mix
        if mix.counts:
            self.want = {k: n for k, n in mix.counts.items() if n}
        news = self.watch.news(mix)  # the goal out of reach, or back (goalwatch.py)
        if changed or periodic or news:
            self.cost_line(now, mix)
        if news == "missed":
            self.ctl.say(self.watch.warning(now, self.book.spent(now), mix))
        elif news == "back":
            self.ctl.say(self.watch.back_line(now, mix))

    def cost_line(self, now: float, mix: Mix | None) -> None:
        spent = self.book.cost_line(now, mix, self.watch.marks(mix) if mix is not None else {})
        if mix is not None:
            self.ctl.say(
                f"t={now:.0f}s: mix {lease_label(mix.counts)}; spent ${spent:.4f}; projected "
                f"finish {mix.finish_s:.0f}s at ${mix.cost_usd:.4f}"
            )

    # -- measurements ---------------------------------------------------------------------
    def observe(self, rec) -> None:
        """Step lines and membership events, to the measurements (`measured.py`) and the
        clock; the first step line after a restart writes its recover line."""
        if isinstance(rec, MembershipEvent):
            if rec.event == "join":
                self._joined(rec)
            if rec.event == "recover":
                self.measured.recovered(rec)
            return
        if not isinstance(rec, StepLine):
            return
        if self.restarts:  # the restarted group's first step line: the recover line
            self.restarts.observe(rec)
        if rec.wall_time_s is not None and self.started is not None:
            since = (self.ctl.t0 + rec.wall_time_s - self.started) * self.scale
            self.last_step_s = self.offset_s + since
        if self.measured.step(rec):
            self.redecide = True  # the global batch changed

    def _joined(self, rec: MembershipEvent) -> None:
        """A requested server's worker was admitted: its request -> admission delay (not an
        initial --workers server's: those are ready when the clock starts)."""
        lease = self.book.leases.get(self.book.server_of.get(rec.worker or "", ""))
        if lease is None or lease.requested_s <= self.offset_s or self.started is None:
            return
        if rec.wall_time_s is not None:
            at_s = self.offset_s + (self.ctl.t0 + rec.wall_time_s - self.started) * self.scale
            self.measured.joined(at_s, lease.requested_s)

    # -- waiting and the end --------------------------------------------------------------
    def waiting(self) -> bool:
        """Whether the run can still go on with no live worker: servers are booting or being
        requested (every spot server revoked at once), within the give-up bound. Not before
        the first group trained (nothing is requested then), nor once it gave up buying."""
        now = self.now()
        self.alone_since_s = now if self.alone_since_s is None else self.alone_since_s
        if now - self.alone_since_s > self.gave_up_after_s or self.gave_up:
            return False
        booting = any(self._state(server) != "gone" for server in self.book.leases)
        return booting or (self.started is not None and any(self.want.values()))

    def finish(self) -> None:
        """Close every lease at the end, write the last cost line, the result's cost block and
        the scenario of this attempt (OUT/scenario.json, and a copy kept in the attempt's log
        folder: a resume's replaces the first, never the second). A run that trained every
        step ends at its last step: the workers' exit after it (seconds of wall time, hours of
        emulated time at large time scales) is an artefact of the emulation, as their
        start-up is."""
        now = self.now()
        if self.last_step_s is not None and self.ctl.steps_done >= self.spec.config.steps:
            now = min(now, self.last_step_s)
        out = pathlib.Path(self.spec.config.out)
        self.book.close_all(now, out)
        if not self.measured.host:  # stopped before it measured the host: no scenario to replay
            return
        scenario = self.scenario().to_json()
        write_json_atomic(out / SCENARIO_FILE, scenario)  # the last attempt's, to replay
        write_json_atomic(self.ctl.logs / SCENARIO_FILE, scenario)  # each attempt's, kept
        book = self.book
        self.ctl.say(self.watch.end_line(book.ledger.total_usd, book.revocations, now))


def check_provider(spec, speeds, job, host_s: float | None) -> None:
    """Every provider and goal error before any worker starts (unknown kind, a bad trace, an
    impossible deadline, a budget below one step): one line each."""
    if spec.config.provider.name:
        Driver(spec, speeds, host_s, job).check()
