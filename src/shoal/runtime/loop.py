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
input) is deterministic: the worker reports it in `<id>.cause.json` and exits with code 2
(`job_errors.py`). What the records need across lost groups and restarts (the run's clock, the
recovery lines, what result.json counts from) is kept by `continuity.py`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from shoal.config import RunConfig
from shoal.console import done_line
from shoal.errors import UserError
from shoal.job import Job, build_job, load_job_file, parse_options
from shoal.plan.assign import NotEnoughCapacity
from shoal.runtime import outputs
from shoal.runtime.batching import check_batch
from shoal.runtime.checkpoint import Checkpointer, load_latest, save_checkpoint
from shoal.runtime.continuity import (
    continue_earlier_life,
    count_from,
    log_restart,
    restart_after_loss,
)
from shoal.runtime.finite import NonFiniteStep
from shoal.runtime.job_errors import reports_errors
from shoal.runtime.local_update import LocalUpdate
from shoal.runtime.membership import Group, Membership, PeerFailure, collective, connect
from shoal.runtime.pacing import Pacer
from shoal.runtime.state import state_sha256, training_state
from shoal.runtime.torchrun_front import under_front
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
    # what result.json counts from (see count_from; None until known): the samples of the
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


def _device(consistency: str) -> torch.device:
    """This worker's GPU, or the CPU where CUDA shows none. Under `shoal run` the launcher pins
    each worker to its own GPU (`launcher.gpus`: cuda:0 inside it) or to none; under torchrun
    the local rank's GPU, one per process. The exact mode asks for deterministic kernels: with
    torch's defaults two identical one-GPU runs of examples/digits.py ended in different bits
    (H100, torch 2.11; cuDNN picks its convolution algorithms freely), and the exact sum only
    makes bits equal if every micro-batch's gradient is."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    index = 0 if os.environ.get("SHOAL_WORKER_ID") else int(os.environ.get("LOCAL_RANK", 0))
    count = torch.cuda.device_count()
    if index >= count:
        raise UserError(
            f"local rank {index} has no GPU of its own: CUDA shows {count} "
            "(one GPU per worker process; --nproc-per-node at most the GPUs)"
        )
    if consistency == "exact":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS starts
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    return device


@reports_errors
def main(config: RunConfig) -> int:
    t0 = float(os.environ.get("SHOAL_T0", time.time()))
    torch.set_num_threads(config.threads)
    device = _device(config.consistency)
    w = _start(config, device, t0)
    w.note("ready")
    # Ctrl-C and a closed terminal (SIGHUP, which killed the worker) too: leave at a boundary
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: _on_sigterm(w))
    while w.trainer.step < config.steps:
        group = w.membership.join()
        if group is None:
            return 0  # the run finished while this worker waited to be admitted
        code = _generation(w, group, device)
        if code is not None:
            return code
    wall_s = time.time() - w.counted_since  # see count_from
    if w.trainer.local:  # local-update mode: the last round's outer step, one final model
        w.trainer.local.finish(w.trainer)
    digest = state_sha256(w.trainer.model, w.trainer.optimizer)
    if w.writer is not None:  # rank 0 of the last generation
        path = w.checkpointer.final(w.trainer.step, training_state(w.trainer))
        result = outputs.write_result(
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
        if RunConfig.from_env() is None:  # torchrun's worker (shoal run's launcher tells it)
            print(done_line(result, f"{time.time() - w.t0:.1f}s with start-up"), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def _start(config: RunConfig, device: torch.device, t0: float) -> Worker:
    """Build the job and the model, then announce this worker to its membership."""
    options = parse_options(list(config.options))
    job = build_job(load_job_file(config.job), options, config.seed)
    # under plain torchrun no launcher checked the flags with the job (shoal run and shoal
    # torchrun's front did)
    if RunConfig.from_env() is None and not under_front():
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
    if config.consistency == "exact":  # reads that escape the seeding: refused (repeatable.py)
        trainer.check_reads()
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
        outputs.clear_spool(out)  # a spool of an earlier run is not ours
    membership.announce_ready()
    w = Worker(config, job, trainer, membership, checkpointer, out, fingerprint, spool_url, t0)
    if membership.restarted:
        continue_earlier_life(w)
    if os.environ.get("SHOAL_LOG_SAMPLES") == "1":  # tests: which samples each step read
        (out / "samples").mkdir(exist_ok=True)
        log = out / "samples" / f"{membership.worker_id}.jsonl"
        trainer.on_samples = lambda step, j, ids: outputs.append_line(
            log, {"step": step, "micro_batch": j, "ids": ids}
        )
    return w


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
    count_from(w, group, device)
    w.has_state, w.attempted = True, -1
    w.writer = outputs.StepLog(w.out, group, w.job, w.t0) if group.rank == 0 else None
    if w.writer and w.earlier_ids is not None:
        log_restart(w, group)
    recovery = None  # the recover line rank 0 writes after the first step, if any
    if w.writer and w.ended_at is not None:
        recovery = (w.ended_at, lost, source)
    elif w.writer:
        recovery = restart_after_loss(w, group)
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
