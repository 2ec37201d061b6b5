"""A worker process: join a group, catch up to the newest state, train, regroup on any change.

Launched once per device, by `shoal run` (which hosts the rendezvous store and injects
events) or by torchrun, as `python -m shoal.worker JOB.py ...`. Each pass of the outer loop is
one generation of the group (see `membership.py`): the worker syncs to the newest state any
member holds, then trains until the step budget is reached, a peer fails (the collective
raises), someone leaves after a notice, or the controller admits a newcomer.

Under torchrun the agent owns membership: a generation is one life of the process. On a peer
failure or SIGTERM the worker spools its step-boundary state to a node-local spool and exits;
the restarted workers resume from the newest spool or checkpoint any of them holds.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from shoal.job import build_job, load_job_file, parse_options
from shoal.runtime import outputs
from shoal.runtime.checkpoint import AsyncCheckpointer, load_latest, save_checkpoint
from shoal.runtime.membership import Group, PeerFailure, StoreMembership
from shoal.runtime.pacing import pacer_from_env
from shoal.runtime.state import state_sha256, training_state
from shoal.runtime.trainer import Trainer
from shoal.runtime.transfer import sync_state


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="job file defining make_job(**options)")
    p.add_argument("--steps", type=int, required=True, help="number of optimizer steps")
    p.add_argument("--out", required=True, help="run directory for metrics, result, checkpoints")
    p.add_argument("--consistency", choices=["exact", "fast"], default="exact")
    p.add_argument("--seed", type=int, default=None, help="override the job's seed")
    p.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to make_job (repeatable)",
    )
    p.add_argument("--replan-every", type=int, default=5, help="re-plan every N steps")
    p.add_argument(
        "--max-micro-batches",
        type=int,
        default=None,
        metavar="N",
        help="at most N micro-batches per worker per step (e.g. a memory limit)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads per worker (pinned: kernels may sum differently "
        "with another thread count)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="STEPS",
        help="durable checkpoint cadence in steps (0: only at the end)",
    )
    p.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=0.0,
        help="durable checkpoint cadence in seconds (0: off)",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        help="directory or fsspec URL for checkpoints (default: OUT/checkpoints)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest valid checkpoint of this job",
    )


def add_launcher_arguments(p: argparse.ArgumentParser) -> None:
    """`shoal run`'s flags: the worker's, plus workers, events and --resume DIR."""
    add_run_arguments(p)
    for action in p._actions:
        if action.dest == "out":
            action.required = False
        if action.dest == "resume":  # `--resume DIR` names the run to continue
            p._remove_action(action)
            for opt in action.option_strings:
                p._option_string_actions.pop(opt, None)
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue the run in DIR from its newest valid checkpoint",
    )
    p.add_argument(
        "--workers",
        required=True,
        metavar="SPEC",
        help="device kinds, one per worker: e.g. v100,k80,k80 or 2xv100,k80",
    )
    p.add_argument(
        "--events",
        default=None,
        metavar="FILE|LIST",
        help="injected events, e.g. 'step 10: kill 1; step 20: add k80; step 35: notice 0 30s'",
    )


@dataclass
class Flags:
    """Set by signal handlers, read at step boundaries."""

    leave: bool = False
    terminated: bool = False


class RegroupPoll:
    """The leader asks the controller whether to regroup (admit a newcomer) while a step's
    collective is in flight, at most every POLL_S: a round trip to the controller, which may
    sit across a slow link, never lengthens a step. The group acts on a yes one step later,
    since the request itself travels in the next step's collective."""

    POLL_S = 0.1

    def __init__(self, membership) -> None:
        self.membership, self.requested, self.asked_at = membership, False, -math.inf

    def __call__(self) -> None:
        if not self.requested and time.monotonic() - self.asked_at >= self.POLL_S:
            self.requested = self.membership.regroup_requested()
            self.asked_at = time.monotonic()


def _note(worker_id: str, t0: float, text: str) -> None:
    """A timestamped line in this worker's log (stderr), for reading a run after the fact."""
    print(f"[{worker_id} +{time.time() - t0:.2f}s] {text}", file=sys.stderr, flush=True)


def _device() -> torch.device:
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


class TorchrunMembership:
    """Membership owned by torchrun: one generation per process life, from the environment."""

    def __init__(self, backend: str):
        self.backend, self.done = backend, False
        self.rank, self.world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        self.generation = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))

    def join(self) -> Group | None:
        if self.done:
            return None
        self.done = True
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group(self.backend, timeout=datetime.timedelta(seconds=60))
        kinds = os.environ.get("SHOAL_WORKER_KINDS", ",".join(["native"] * self.world))
        return Group(
            self.generation,
            self.rank,
            self.world,
            tuple(f"w{r}" for r in range(self.world)),
            tuple(kinds.split(",")),
            tuple([1.0] * self.world),
        )

    def regroup_requested(self) -> bool:
        return False

    def leave_generation(self) -> None:
        pass

    def announce_left(self, steps_done: int) -> None:
        pass  # torchrun's agent sees the exit itself


def main(args: argparse.Namespace) -> int:
    t0 = float(os.environ.get("SHOAL_T0", time.time()))
    torch.set_num_threads(args.threads)
    device = _device()
    backend = "nccl" if device.type == "cuda" else "gloo"
    options = parse_options(args.option)
    job = build_job(load_job_file(args.job), options, args.seed)
    out = outputs.prepare_out_dir(args.out)
    store_addr = os.environ.get("SHOAL_STORE")
    trainer = Trainer(
        job,
        0,
        1,
        args.consistency,
        device,
        pacer=pacer_from_env(),
        replan_every=args.replan_every,
        max_micro_batches=args.max_micro_batches,
    )
    fingerprint = outputs.job_fingerprint(args.job, options, job, args.consistency, trainer.model)
    ckpt_url = args.checkpoint_dir or str(out / "checkpoints")
    spool_url = outputs.spool_dir(out)
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) == 0 and not args.resume:
        shutil.rmtree(spool_url, ignore_errors=True)  # a spool of an earlier run is not ours
    if store_addr:
        host, port = store_addr.rsplit(":", 1)
        worker_id = os.environ["SHOAL_WORKER_ID"]
        membership = StoreMembership(worker_id, host, int(port), backend)
        membership.announce_ready()
    else:
        membership, worker_id = TorchrunMembership(backend), f"w{os.environ.get('RANK', 0)}"
    if os.environ.get("SHOAL_LOG_SAMPLES") == "1":  # tests: which samples each step read
        (out / "samples").mkdir(exist_ok=True)
        trainer.on_samples = lambda step, j, ids: outputs.append_line(
            out / "samples" / f"{worker_id}.jsonl", {"step": step, "micro_batch": j, "ids": ids}
        )
    _note(worker_id, t0, "ready")
    flags = Flags()
    signal.signal(signal.SIGTERM, lambda *_: _on_sigterm(flags, store_addr is not None))

    def spool(exit_code: int) -> int:
        """torchrun owns membership: leave the step-boundary state on this node for the
        restarted group, and exit."""
        save_checkpoint(spool_url, trainer.step, training_state(trainer), fingerprint, keep=1)
        return exit_code

    def fallback() -> dict | None:  # nobody in the group holds state: spool, then checkpoint
        # under the controller a fresh run's directory holds no checkpoint (it refuses one)
        later = store_addr is not None or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0
        for url, use in ((spool_url, later), (ckpt_url, args.resume or later)):
            found = load_latest(url, fingerprint) if use else None
            if found:
                return found[1]
        return None

    has_state, attempted, ended_at = False, -1, None
    writer = checkpointer = None
    start, samples_at_start = time.perf_counter(), 0
    last_ckpt = time.monotonic()
    while trainer.step < args.steps:
        group = membership.join()
        if group is None:
            return 0  # the run finished while this worker waited to be admitted
        trainer.regroup(group.rank, group.world_size, group.priors)
        _note(
            worker_id, t0, f"generation {group.generation}: rank {group.rank} of {group.world_size}"
        )
        rec = None
        try:
            source, lost = sync_state(trainer, has_state, fallback, device, attempted)
            _note(worker_id, t0, f"state at step {trainer.step} from {source}")
            if not has_state:
                samples_at_start = trainer.samples_seen  # a resumed run counts its own samples
            has_state, attempted = True, -1
            writer = outputs.StepLog(out, group, job, t0) if group.rank == 0 else None
            if writer and checkpointer is None:
                checkpointer = AsyncCheckpointer(ckpt_url, fingerprint)
            first, poll = True, RegroupPoll(membership) if group.rank == 0 else None
            while trainer.step < args.steps:
                attempted = trainer.step
                ask = poll is not None and poll.requested
                rec = trainer.train_step(leaving=flags.leave, regroup=ask, overlap=poll)
                attempted = -1
                if writer:
                    writer.step(rec, trainer)
                    if first and ended_at is not None:
                        writer.recovered(group, ended_at, lost, source)
                    if _checkpoint_due(args, trainer.step, last_ckpt):
                        checkpointer.save(trainer.step, training_state(trainer))
                        last_ckpt = time.monotonic()
                first = False
                if rec.leaving or rec.regroup:
                    break
        except PeerFailure as exc:
            ended_at = time.time()
            _note(worker_id, t0, f"group broke at step {trainer.step}: {exc}")
            if store_addr is None:
                return spool(1)
            membership.leave_generation()
            continue
        if store_addr is None and trainer.step < args.steps:
            return spool(143 if flags.terminated else 1)
        if rec is not None and group.rank in rec.leaving:
            _finish_checkpoints(checkpointer)
            membership.leave_generation()
            membership.announce_left(trainer.step)
            _note(worker_id, t0, f"left after step {trainer.step - 1}")
            return 0  # a graceful leave: the group has the state, nothing is lost
        ended_at = time.time()
        if trainer.step < args.steps:
            membership.leave_generation()
    wall_s = time.perf_counter() - start
    digest = state_sha256(trainer.model, trainer.optimizer)
    if writer is not None:  # rank 0 of the last generation
        _finish_checkpoints(checkpointer)
        path = save_checkpoint(ckpt_url, trainer.step, training_state(trainer), fingerprint)
        outputs.write_result(
            out,
            trainer,
            group,
            digest,
            wall_s,
            args.consistency,
            path,
            fingerprint,
            samples_at_start,
        )
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def _on_sigterm(flags: Flags, controlled: bool) -> None:
    flags.leave = True  # leave at the next step boundary, handing the state to the group
    if not controlled:
        flags.terminated = True


def _checkpoint_due(args: argparse.Namespace, step: int, last: float) -> bool:
    by_steps = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
    by_time = args.checkpoint_seconds > 0 and time.monotonic() - last >= args.checkpoint_seconds
    return by_steps or by_time


def _finish_checkpoints(checkpointer: AsyncCheckpointer | None) -> None:
    if checkpointer is not None:
        checkpointer.wait()
