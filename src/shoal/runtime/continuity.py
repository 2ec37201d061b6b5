"""What a worker carries across a lost group or a torchrun restart, so that the run's records read
as one run. A process torchrun restarted keeps the run's clock and the last group the earlier
life logged (`continue_earlier_life`), and its rank 0 logs who was gone and who joined
(`log_restart`); rank 0 of a group that took its state from no member, every holder of it lost,
logs the recovery and the steps done again (`restart_after_loss`); and every generation agrees
on what result.json's wall time and samples/s count from (`count_from`).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from shoal.metrics.files import METRICS_FILE, read_metrics
from shoal.metrics.training import MembershipEvent, StepLine
from shoal.runtime import outputs
from shoal.runtime.membership import Group, collective

if TYPE_CHECKING:
    from shoal.runtime.loop import Worker


def continue_earlier_life(w: Worker) -> None:
    """A process restarted by torchrun: keep the run's clock (wall times stay those of the whole
    run, not of this life) and remember the group the last life logged, so rank 0 can log who
    was lost or joined and the recovery time (from the last record the earlier life wrote)."""
    path = w.out / METRICS_FILE
    records = list(read_metrics(path)) if path.exists() else []
    timed = [r for r in records if r.wall_time_s is not None]
    steps = [r for r in records if isinstance(r, StepLine)]
    if not timed or not steps:
        return
    last_write = path.stat().st_mtime
    if "SHOAL_T0" not in os.environ:
        w.t0 = last_write - timed[-1].wall_time_s
    w.ended_at = last_write
    w.earlier_ids = tuple(share.id for share in steps[-1].workers)


def log_restart(w: Worker, group: Group) -> None:
    """Rank 0 of a group torchrun restarted: the membership changes, as `shoal run` logs them."""
    before, now = set(w.earlier_ids or ()), set(group.ids)
    restart = f"torchrun restart {group.generation}"
    changes = [("fail", i, f"gone at {restart}") for i in sorted(before - now)]
    changes += [("join", i, f"admitted at {restart}") for i in sorted(now - before)]
    for event, wid, detail in changes:
        record = MembershipEvent(
            event=event,
            worker=wid,
            device="native",
            step=w.trainer.step,
            wall_time_s=time.time() - w.t0,
            detail=detail,
        )
        outputs.append_line(w.out / METRICS_FILE, record)
    w.earlier_ids = None


def count_from(w: Worker, group: Group, device: torch.device) -> None:
    """What result.json's wall time and samples/s count from, whichever worker writes it: the
    moment this attempt's first group began training (worker start-up is not training, as in
    the step lines' samples/s) and the samples of the state it began with (0 from scratch, the
    resumed state's on a resume). The first group's members set both, and every generation
    hands them to its newcomers (one MIN all-reduce, a newcomer sending `unknown`), so a rank 0
    that joined mid-run reports the attempt, not its own stretch. A later group none of whose
    members knew them (every holder lost, a torchrun restart) counts from the state it took
    and the attempt's clock (t0: start-up and the lost work included)."""
    if w.counted_since is None and group.generation == 0:
        w.samples_at_start, w.counted_since = w.trainer.samples_seen, time.time()
    if dist.is_initialized():  # every member calls it: the same collectives on all
        unknown = torch.iinfo(torch.int64).max
        known = w.counted_since is not None
        mine = [w.samples_at_start, int(w.counted_since * 1e6)] if known else [unknown, unknown]
        agreed = torch.tensor(mine, dtype=torch.int64, device=device)
        collective(dist.all_reduce, agreed, op=dist.ReduceOp.MIN)
        if int(agreed[1]) != unknown:
            w.samples_at_start, w.counted_since = int(agreed[0]), int(agreed[1]) / 1e6
    if w.counted_since is None:
        w.samples_at_start, w.counted_since = w.trainer.samples_seen, w.t0


def restart_after_loss(w: Worker, group: Group) -> tuple[float, int, str, int] | None:
    """A recovery for rank 0 of a group that took its state from no member (`w.restored`: a
    fresh start, the spool or a durable checkpoint) after an earlier generation of this attempt
    trained: every holder of the state was lost, and the steps done since are done again. It
    counts from the controller's line for the last holder gone (a `fail`, whose step in flight
    is lost too, or a `leave`), written before this generation was published. Under
    `--recovery restart` the controller logs the restarts it makes itself (launcher/restart.py)."""
    if w.restored is None or group.generation == 0 or w.config.provider.recovery == "restart":
        return None
    records = read_metrics(w.writer.path) if w.writer.path.exists() else []
    gone = [r for r in records if isinstance(r, MembershipEvent) and r.event in ("fail", "leave")]
    if not gone or gone[-1].wall_time_s is None:
        return None  # nobody trained and was lost (a torchrun restart before any step)
    last = gone[-1]
    done = w.writer.logged + 1  # steps done before the loss (recomputed ones are not logged)
    lost = max(0, done - w.trainer.step) + int(last.event == "fail")
    source = f"{w.restored}: every holder of the state was lost"
    return w.t0 + last.wall_time_s, lost, source, w.trainer.step
