"""A worker process: join a group, catch up to the newest state, train, regroup on any change.

Launched once per device, by `shoal run` (which hosts the rendezvous store and injects
events) or by torchrun, as `python -m shoal.worker JOB.py ...`; either way it is handed a
`RunConfig`. Each pass of the outer loop is one generation of the group (see
`membership.py`): the worker syncs to the newest state any member holds, then trains until the
step budget is reached, a peer fails (the collective raises), someone leaves after a notice,
or the controller admits a newcomer.

What happens when a generation ends early is the membership's call, decided once at start-up:
under `shoal run` the worker joins the next generation; under torchrun (a generation is one
life of the process) it spools its step-boundary state to a node-local spool and exits, and
the restarted workers resume from the newest spool or checkpoint any of them holds.

Any other exception (the job's code raising, wrong shapes, a loss that is not a scalar, bad
input) is deterministic: every worker would meet it again, after any regroup or resume. The
worker then reports it in one line (file and line) in `<id>.cause.json` for the controller, with
the traceback, and exits with code 2.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from shoal.config import RunConfig
from shoal.errors import CAUSE_SUFFIX, UserError, user_code_error
from shoal.job import Job, build_job, load_job_file, parse_options
from shoal.metrics.files import METRICS_FILE, read_metrics
from shoal.metrics.training import MembershipEvent, StepLine
from shoal.plan.assign import NotEnoughCapacity
from shoal.runtime import outputs
from shoal.runtime.batching import check_batch
from shoal.runtime.checkpoint import Checkpointer, load_latest, save_checkpoint
from shoal.runtime.finite import NonFiniteStep
from shoal.runtime.local_update import LocalUpdate
from shoal.runtime.membership import Group, Membership, PeerFailure, collective, connect
from shoal.runtime.pacing import Pacer
from shoal.runtime.state import state_sha256, training_state
from shoal.runtime.trainer import StepRecord, Trainer
from shoal.runtime.transfer import sync_state


@dataclass
class Worker:
    """One worker process's run, and the little that lives across its generations."""

    config: RunConfig
    job: Job
    trainer: Trainer
    membership: Membership
    checkpointer: Checkpointer
    out: object  # pathlib.Path of the run directory
    fingerprint: str
    spool_url: str
    t0: float
    leave: bool = False  # set by SIGTERM: leave at the next step boundary
    terminated: bool = False  # ... and, if the group ends early, exit as terminated
    has_state: bool = False
    attempted: int = -1  # the step in flight when the last group broke (-1: none)
    ended_at: float | None = None  # when the last generation ended (for the recovery line)
    # what result.json counts from (see _count_from; None until known): the samples of the
    # state this attempt began with and when its first group began training
    samples_at_start: int = 0
    counted_since: float | None = None
    restored: str | None = None  # nobody in the group held state: what it was restored from
    writer: outputs.StepLog | None = None  # rank 0 of the current generation only
    earlier_ids: tuple[str, ...] | None = None  # a restarted process: the last group's members

    def note(self, text: str) -> None:
        """A timestamped line in this worker's log (stderr), for reading a run after the fact."""
        wid = self.membership.worker_id
        print(f"[{wid} +{time.time() - self.t0:.2f}s] {text}", file=sys.stderr, flush=True)

    def spool(self) -> None:
        """Leave the step-boundary state on this node for the restarted group."""
        state = training_state(self.trainer)
        save_checkpoint(self.spool_url, self.trainer.step, state, self.fingerprint, keep=1)

    def fallback(self) -> dict | None:
        """Nobody in the group holds state: this run's spool, then its checkpoint, if any."""
        later = self.membership.may_hold_state
        ckpt_url = self.checkpointer.url
        resume = self.config.resume
        for url, use in ((self.spool_url, later), (ckpt_url, resume or later)):
            required = resume and url == ckpt_url  # --resume with nothing usable: an error
            found = load_latest(url, self.fingerprint, required) if use else None
            if found:
                what = "checkpoint" if url == ckpt_url else "spool"
                self.restored = f"the {what} of step {found[0]}"
                return found[1]
        self.restored = "a fresh start"
        return None


def _device() -> torch.device:
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def reports_errors(main):
    """Turn an exception that is not a peer's failure into a reported cause and a UserError
    (which the worker's entry prints as one line, exit code 2)."""

    @functools.wraps(main)
    def wrapper(config: RunConfig) -> int:
        try:
            return main(config)
        except PeerFailure:
            raise
        except Exception as exc:
            error = exc if isinstance(exc, UserError) else user_code_error(exc)
            text = traceback.format_exc()
            path = _write_cause(config, str(error), text)
            if os.environ.get("SHOAL_WORKER_ID") or path is None:
                sys.stderr.write(text)  # under shoal run, stderr is the worker's log
            elif not isinstance(exc, UserError):  # torchrun: stderr is the console, one line
                raise UserError(f"{error} (traceback in {path})") from exc
            raise error from exc

    return wrapper


def _write_cause(config: RunConfig, cause: str, text: str) -> pathlib.Path | None:
    """`<id>.cause.json` where the controller looks for it (SHOAL_CAUSE_DIR), else OUT/logs;
    its path, or None if it could not be written."""
    wid = os.environ.get("SHOAL_WORKER_ID") or f"w{os.environ.get('RANK', 0)}"
    folder = pathlib.Path(os.environ.get("SHOAL_CAUSE_DIR") or pathlib.Path(config.out) / "logs")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{wid}{CAUSE_SUFFIX}.tmp"
        tmp.write_text(json.dumps({"worker": wid, "cause": cause, "traceback": text}))
        os.replace(tmp, folder / f"{wid}{CAUSE_SUFFIX}")
    except OSError:
        return None  # the one-line error on stderr still tells it
    return folder / f"{wid}{CAUSE_SUFFIX}"


@reports_errors
def main(config: RunConfig) -> int:
    t0 = float(os.environ.get("SHOAL_T0", time.time()))
    torch.set_num_threads(config.threads)
    device = _device()
    w = _start(config, device, t0)
    w.note("ready")
    for sig in (signal.SIGTERM, signal.SIGINT):  # Ctrl-C too: leave at a step boundary
        signal.signal(sig, lambda *_: _on_sigterm(w))
    while w.trainer.step < config.steps:
        group = w.membership.join()
        if group is None:
            return 0  # the run finished while this worker waited to be admitted
        code = _generation(w, group, device)
        if code is not None:
            return code
    wall_s = time.time() - w.counted_since  # see _count_from
    if w.trainer.local:  # local-update mode: the last round's outer step, one final model
        w.trainer.local.finish(w.trainer)
    digest = state_sha256(w.trainer.model, w.trainer.optimizer)
    if w.writer is not None:  # rank 0 of the last generation
        path = w.checkpointer.final(w.trainer.step, training_state(w.trainer))
        outputs.write_result(
            w.out,
            w.trainer,
            group,
            digest,
            wall_s,
            config.consistency,
            path,
            w.fingerprint,
            w.samples_at_start,
        )
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def _start(config: RunConfig, device: torch.device, t0: float) -> Worker:
    """Build the job and the model, then announce this worker to its membership."""
    options = parse_options(list(config.options))
    job = build_job(load_job_file(config.job), options, config.seed)
    if RunConfig.from_env() is None:  # torchrun's: no launcher checked the flags with the job
        check_batch(config.batch, job, config.consistency, warn=os.environ.get("RANK", "0") == "0")
    out = outputs.prepare_out_dir(config.out)
    trainer = Trainer(
        job,
        device,
        consistency=config.consistency,
        pacer=Pacer(config.emulation.slowdown, config.emulation.host_s, config.emulation.sync_s),
        replan_every=config.replan_every,
        max_micro_batches=config.max_micro_batches,
        batch=config.batch,
        on_nonfinite=config.on_nonfinite,
        link=config.link,
    )
    if config.link.local_steps is not None:
        trainer.local = LocalUpdate(trainer, config.link, config.peer_timeout_s)
    fingerprint = outputs.job_fingerprint(
        config.job, options, job, config.consistency, trainer.model, config.link, config.batch
    )
    ck = config.checkpoint
    checkpointer = Checkpointer(
        ck.dir or str(out / "checkpoints"), fingerprint, ck.every, ck.seconds, ck.keep
    )
    membership = connect("nccl" if device.type == "cuda" else "gloo", config.peer_timeout_s)
    spool_url = outputs.spool_dir(out)
    if not membership.restarted and not config.resume:
        shutil.rmtree(spool_url, ignore_errors=True)  # a spool of an earlier run is not ours
    membership.announce_ready()
    w = Worker(config, job, trainer, membership, checkpointer, out, fingerprint, spool_url, t0)
    if membership.restarted:
        _continue_earlier_life(w)
    if os.environ.get("SHOAL_LOG_SAMPLES") == "1":  # tests: which samples each step read
        (out / "samples").mkdir(exist_ok=True)
        log = out / "samples" / f"{membership.worker_id}.jsonl"
        trainer.on_samples = lambda step, j, ids: outputs.append_line(
            log, {"step": step, "micro_batch": j, "ids": ids}
        )
    return w


def _continue_earlier_life(w: Worker) -> None:
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


def _log_restart(w: Worker, group: Group) -> None:
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


def _generation(w: Worker, group: Group, device: torch.device) -> int | None:
    """Train one generation of the group; an exit code if this process is done early."""
    trainer, membership, steps = w.trainer, w.membership, w.config.steps
    trainer.regroup(group)
    w.note(f"generation {group.generation}: rank {group.rank} of {group.world_size}")
    try:
        rec = _train(w, group, device)
    except NonFiniteStep:
        if group.rank == 0:  # the state is still at the step's start: the last finite one
            w.checkpointer.final(trainer.step, training_state(trainer))
        if dist.is_initialized():  # nobody exits (and is reaped) before it is written
            collective(dist.barrier)
        raise
    except PeerFailure as exc:
        w.ended_at = time.time()
        w.note(f"group broke at step {trainer.step}: {exc}")
        code = membership.on_lost(w.spool, 1)
        if code is None:
            membership.leave_generation()
        return code
    if trainer.step < steps:
        code = membership.on_lost(w.spool, 143 if w.terminated else 1)
        if code is not None:
            return code
    if rec is not None and group.rank in rec.leaving:
        if group.rank == 0 and len(rec.leaving) == group.world_size:  # the last ones leave
            w.checkpointer.final(trainer.step, training_state(trainer))
        w.checkpointer.finish()
        membership.leave_generation()
        membership.announce_left(trainer.step)
        w.note(f"left after step {trainer.step - 1}")
        return 0  # a graceful leave: the group has the state, nothing is lost
    w.ended_at = time.time()
    if trainer.step < steps:
        membership.leave_generation()
    return None


def _train(w: Worker, group: Group, device: torch.device):
    """Sync to the newest state, then step until the budget is spent or the group changes;
    the last StepRecord (None if no step ran)."""
    trainer = w.trainer
    w.restored = None  # set by w.fallback, which runs only if no member holds state
    source, lost = sync_state(trainer, w.has_state, w.fallback, device, w.attempted)
    if trainer.exchange is not None:  # each site's residuals to its members (sites.py)
        trainer.exchange.share(device, trainer.step)
    w.note(f"state at step {trainer.step} from {source}")
    _count_from(w, group, device)
    w.has_state, w.attempted = True, -1
    w.writer = outputs.StepLog(w.out, group, w.job, w.t0) if group.rank == 0 else None
    if w.writer and w.earlier_ids is not None:
        _log_restart(w, group)
    recovery = None  # the recover line rank 0 writes after the first step, if any
    if w.writer and w.ended_at is not None:
        recovery = (w.ended_at, lost, source)
    elif w.writer:
        recovery = _restart_after_loss(w, group)
    rec, first = None, True
    while trainer.step < w.config.steps:
        w.attempted = trainer.step
        ask = group.rank == 0 and w.membership.regroup_requested()
        try:
            rec = trainer.train_step(leaving=w.leave, regroup=ask)
        except NotEnoughCapacity as exc:  # planned before any compute: the state is whole
            raise _short_of_capacity(w, group, exc) from None
        w.attempted = -1
        if w.writer:
            w.writer.step(rec, trainer)
            if first and recovery:
                w.writer.recovered(group, *recovery)
            w.checkpointer.maybe_save(trainer.step, lambda: training_state(trainer))
        first = False
        if rec.leaving or rec.regroup:
            return replace(rec, leaving=_leaving(w, group, rec, device))
    return rec


def _short_of_capacity(w: Worker, group: Group, exc: NotEnoughCapacity) -> UserError:
    """The group left after a loss cannot hold the step's micro-batches under the caps: rank 0
    writes the state it holds as a durable checkpoint (the others wait for it, so that no exit
    stops the run first) and the run stops on one line saying how to go on."""
    step = w.trainer.step
    if group.rank == 0:
        w.checkpointer.final(step, training_state(w.trainer))
    if dist.is_initialized():
        collective(dist.barrier)
    return UserError(
        f"{exc}; the state of step {step} is checkpointed: --resume with more workers or a "
        "higher --max-micro-batches"
    )


def _count_from(w: Worker, group: Group, device: torch.device) -> None:
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


def _restart_after_loss(w: Worker, group: Group) -> tuple[float, int, str, int] | None:
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


def _leaving(w: Worker, group: Group, rec: StepRecord, device: torch.device) -> list[int]:
    """The ranks that leave at a boundary where the generation ends anyway (a leave or a
    regroup): those the step's flags named, and every member asked to leave since it sent its
    own. An interrupted launcher asks every worker at once, but the signals land a little
    apart; without this the first ones left and the others re-formed to train a step alone."""
    if not dist.is_initialized():
        return sorted(set(rec.leaving) | ({group.rank} if w.leave else set()))
    flags = torch.zeros(group.world_size, dtype=torch.int64, device=device)
    flags[group.rank] = int(w.leave)
    collective(dist.all_reduce, flags)
    return sorted(set(rec.leaving) | {r for r, f in enumerate(flags.tolist()) if f})


def _on_sigterm(w: Worker) -> None:
    # leave at the next step boundary, handing the state to the group; should the group end
    # early anyway (torchrun), exit as terminated
    w.leave = w.terminated = True
