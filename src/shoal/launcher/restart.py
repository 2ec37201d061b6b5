"""`--recovery restart`: a live run recovers from a revocation as SkyPilot's managed spot does.

For comparison with shoal's own recovery (the survivors go on and a replacement joins them),
a revocation stops every worker and gives back every server; the autoscaler
(`autoscale.Driver`) then requests the held mix again (each replacement pays the start-up) and
the new group loads the newest durable checkpoint. A revocation while the replacements boot
only replaces that server: nothing trains to be stopped. The notice is ignored: the job is
stopped at the revocation, as a managed spot job is when its cluster is preempted.

The workers write no recover line under this strategy (`runtime.continuity`); the controller writes
it at the restarted group's first step line, with the steps of work lost (those done since the
checkpoint it loaded, and the one in flight, as a recovery from peers counts its own) and the
time from the stop to that line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shoal.config import RunConfig
from shoal.launcher.events import Event
from shoal.launcher.leases import LeaseBook
from shoal.launcher.rundir import checkpoint_dir
from shoal.metrics.training import MembershipEvent, StepLine
from shoal.runtime.checkpoint import latest_checkpoint_step
from shoal.runtime.outputs import append_line


class Restarts:
    """One run's restarts: the stop at each revocation, the recover line after it. The
    controller is the lease book's (`book.ctl`)."""

    def __init__(self, config: RunConfig, book: LeaseBook) -> None:
        self.config, self.book = config, book
        # (steps done, wall time since t0, the checkpoint's step, its generation) when every
        # worker was stopped, until the restarted group's first step line
        self.stopped: tuple[int, float, int, int] | None = None

    def revoked(self, server: str, now: float, state: Callable[[str], str]) -> None:
        """`server`'s revocation is due at emulated `now`: every worker is killed and every
        server given back (`state`: a server's worker's state, as the driver sees it)."""
        book, ctl = self.book, self.book.ctl
        training = any(state(s) in ("member", "leaving") for s in book.leases)
        victims = [server] + ([s for s in book.leases if s != server] if training else [])
        if training and self.stopped is None:
            # the step the new group will load: the newest durable checkpoint now (the
            # killed workers write no more; a redone step is not logged twice, so the step
            # lines cannot tell it)
            ckpt = latest_checkpoint_step(checkpoint_dir(self.config)) or 0
            self.stopped = (ctl.steps_done, time.time() - ctl.t0, ckpt, ctl.generation)
        ctl.say(
            f"server {server} revoked: "
            + ("every worker restarts from the last durable checkpoint" if training else "replaced")
        )
        book.revocations += 1
        for s in victims:
            if state(s) != "gone":
                ctl.pending.append(Event("kill", at_s=0.0, worker=book.worker_of.get(s)))
            lease = book.leases[s]
            t_s = lease.revoke_at_s if s == server else now
            book.close(s, t_s, "revoked" if s == server else "released")

    def observe(self, rec: StepLine) -> None:
        """A step line: the restarted group's first (a later generation than the stopped one's;
        the stopped group's last steps, written after the stop, are not it: they made a
        recovery of 0.0007 s) writes the recover line."""
        if self.stopped is None or (rec.generation or 0) <= self.stopped[3]:
            return
        steps_then, stopped_at, ckpt, _ = self.stopped
        self.stopped = None
        lost = max(0, steps_then + 1 - ckpt)
        first = rec.workers[0] if rec.workers else None
        line = MembershipEvent(
            event="recover", worker=first.id if first else "?",
            device=first.device if first else None, step=ckpt, wall_time_s=rec.wall_time_s,
            recovery_time_s=rec.wall_time_s - stopped_at, lost_steps=lost,
            detail=f"restart: every worker from the durable checkpoint of step {ckpt}",
        )  # fmt: skip
        append_line(self.book.ctl.metrics, line)
