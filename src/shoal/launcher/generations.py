"""The group's generations in a local elastic run: which workers form the next one, and when.

The membership decisions of the protocol in `shoal.runtime.membership`, taken at each poll of
the controller (`supervisor.Controller`, whose base class this is) from the store's keys:
- generation 0 is the initial workers, published once each has built its model and arrived
  (one that is not there `STARTUP_GRACE_S` after a peer arrived joins later, as a newcomer);
- when a member dies (its process exits without finishing) the survivors' collective fails
  and they wait for the next generation; the controller publishes it once every surviving
  member has arrived;
- liveness: a member that stalls (stopped, swapping, frozen) makes its peers' collective time
  out after `--peer-timeout`; they arrive at the next generation, and a member still missing
  one more timeout after the first arrival is declared lost. The group re-forms without it; if
  it wakes up it finds its group gone and is admitted again like a newcomer;
- a member given a notice leaves after the step that announced it, and the survivors re-form
  without it (one asked too late to leave at that boundary goes on to the next generation and
  leaves after its first step);
- a new worker is admitted only when it has built its model (`ready`), by asking the current
  group to regroup at the next step boundary, so joins cost the group one regroup, not a
  process start-up; a group re-forming after every member is gone waits up to `LAST_CALL_S`
  for the other workers whose servers are up, as torchrun's last call does.
The processes themselves (started, signalled, reaped) are the controller's.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from shoal.console import counted

if TYPE_CHECKING:
    from shoal.launcher.supervisor import Worker

# how long the first workers wait for a peer still building its model (importing torch and
# building a model can take tens of seconds on a loaded host) before starting without it
STARTUP_GRACE_S = 60.0
# how long a group re-forming from nobody waits for more booted workers after the first is ready
# (torchrun's rendezvous waits its `last_call_timeout`, 30 s by default, for more nodes)
LAST_CALL_S = 30.0


class Generations:
    """The controller's membership decisions (`supervisor.Controller` is built on this class):
    they read the controller's worker table (`workers`), `store`, autoscale `driver`,
    `steps_done`, `t0`, `spec`, `speeds` and `timeout_s`, and log through its `event` and
    `say`."""

    def __init__(self) -> None:
        self.members: list[str] = []
        self.generation = 0
        self.formed_at_step = 0  # steps done when the current generation was published
        self.first_arrival: float | None = None  # when a member first waited for the next one
        self.first_ready: float | None = None  # when a group to form from nobody had one ready
        self.change_seen: float | None = None  # when the current generation was seen to end

    def start_group(self) -> None:
        """Publish generation 0 once every initial worker still alive has arrived."""
        first = [self.workers[f"w{i}"] for i in range(len(self.spec.kinds))]
        initial = [w for w in first if w.state == "starting"]
        arrived = [w for w in initial if self.store.check([f"arrived/0/{w.id}"])]
        if not arrived:
            return
        now = time.monotonic()
        self.first_arrival = self.first_arrival or now
        late = now - self.first_arrival > max(STARTUP_GRACE_S, self.timeout_s)
        if len(arrived) < len(initial) and not late:
            return
        self.first_arrival = None
        waited = time.time() - self.t0
        self.say(f"{counted(len(arrived), 'worker')} ready after {waited:.1f}s; training")
        self.publish([w.id for w in arrived])

    def admit_and_regroup(self) -> None:
        nxt = self.generation + 1
        ready = [
            w
            for w in self.workers.values()
            if self.booted(w) and self.store.check([f"ready/{w.id}", f"arrived/{nxt}/{w.id}"])
        ]
        # a leaving member goes after the step that announced it: survivors then arrive
        broken = any(self.workers[m].state in ("gone", "leaving") for m in self.members)
        requested = self.store.check([f"regroup/{self.generation}"])
        if ready and not broken and not requested:
            self.store.set(f"regroup/{self.generation}", "1")  # stop at the next boundary
            requested = True
        survivors = [m for m in self.members if self.still_member(self.workers[m], nxt)]
        arrived = [m for m in survivors if self.store.check([f"arrived/{nxt}/{m}"])]
        now = time.monotonic()
        if arrived and self.first_arrival is None:
            self.first_arrival = now  # a regroup, a failure, or a stall
        if not (broken or requested or arrived):
            return
        self.change_seen = self.change_seen or now
        # late: one timeout after the first arrival; or, with nobody arrived, after the longest
        # a healthy member can take to reach the boundary (a step and its collective's timeout,
        # the step itself shorter than the timeout) and one more timeout
        late = (
            now - self.first_arrival > self.timeout_s
            if arrived
            else now - self.change_seen > 3 * self.timeout_s
        )
        if len(arrived) < len(survivors):
            if not late:
                return
            for m in [m for m in survivors if m not in arrived]:
                self.declare_lost(self.workers[m])
            survivors = arrived
        candidates = survivors + [w.id for w in ready]
        if not candidates or len(arrived) < len(survivors):
            return
        if not survivors and not self.last_call_over(ready, now):
            return
        for w in ready:
            self.event("join", w, f"admitted in generation {nxt}")
        self.publish(candidates)

    def still_member(self, w: Worker, nxt: int) -> bool:
        """A member that goes on to generation `nxt`: one not asked to leave, or one asked too
        late to leave at the last boundary, which arrived (it leaves after its next step)."""
        if w.state == "leaving" and w.proc.poll() is None:
            return self.store.check([f"arrived/{nxt}/{w.id}"])
        return w.state == "member"

    def booted(self, w: Worker) -> bool:
        """A worker not yet in the group, alive, whose server (if bought) has booted."""
        alive = w.state == "starting" and w.proc.poll() is None
        return alive and (not self.driver or self.driver.admissible(w.id))

    def last_call_over(self, ready: list[Worker], now: float) -> bool:
        """A group re-forming from nobody (every member gone) waits for the workers whose
        servers are up and who are still building their model, up to `LAST_CALL_S` after the
        first was ready. Servers bought together come up together, and nobody trains meanwhile:
        admitting only the first would leave the others waiting out a step of one worker."""
        coming = [
            w
            for w in self.workers.values()
            if self.booted(w) and not w.declared_lost and w not in ready
        ]
        if not coming:
            return True
        if self.first_ready is None:
            self.first_ready = now
        return now - self.first_ready > LAST_CALL_S

    def declare_lost(self, w: Worker) -> None:
        """A member silent past the deadline: the group goes on without it. Should it wake up,
        its collective fails, it waits for a later generation and is admitted as a newcomer."""
        w.state, w.declared_lost = "starting", True
        silent = time.monotonic() - self.change_seen
        self.event("fail", w, f"no response {silent:.0f}s after its group ended (stalled?)")

    def publish(self, ids: list[str]) -> None:
        if self.members:
            self.generation += 1
        for wid in ids:
            w = self.workers[wid]
            # one asked to leave stays so: it leaves after the generation's first step
            w.state, w.declared_lost = ("leaving" if w.state == "leaving" else "member"), False
        self.members, self.formed_at_step = ids, self.steps_done
        self.first_arrival = self.change_seen = self.first_ready = None
        kinds = [self.workers[i].kind for i in ids]
        self.store.set(
            f"members/{self.generation}",
            json.dumps(
                {
                    "ids": ids,
                    "kinds": kinds,
                    "priors": [self.speeds.prior[k] for k in kinds],
                }
            ),
        )

    def publish_done(self) -> None:
        self.store.set(f"members/{self.generation + 1}", json.dumps({"done": True}))
