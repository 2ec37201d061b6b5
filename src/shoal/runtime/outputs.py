"""What a run writes: `metrics.jsonl`, `result.json`, the job fingerprint and the spool location.

The records and their fields belong to `shoal.metrics`; this module writes them. Step lines are
written by rank 0 of the current group; membership lines by the launcher (join, leave, fail) and
by rank 0 after a regroup, or after a restart from a checkpoint or scratch once every holder of
the state was lost (recover, with the recovery time and the steps of work lost). Lines
are appended with single writes, so the two writers never tear a line; a step recomputed after
a failure is logged once.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import time
from typing import Any

from shoal.config import BatchConfig, SlowLinkConfig
from shoal.console import counted
from shoal.control.bandwidth import parse_compress
from shoal.errors import UserError, cannot_write
from shoal.job import loss_scale_settings
from shoal.metrics.files import METRICS_FILE, RESULT_FILE, RunResult, read_metrics
from shoal.metrics.training import MembershipEvent, StepLine, WorkerShare
from shoal.runtime.batching import batch_settings


def prepare_out_dir(out_dir: str | pathlib.Path) -> pathlib.Path:
    """Create the run directory and check it can be written, or fail with a one-line error."""
    out = pathlib.Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".shoal-write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write to --out {str(out)!r}: {exc.strerror or exc}") from None
    return out


def append_line(path: pathlib.Path, record: StepLine | MembershipEvent | dict[str, Any]) -> None:
    """Append one record as one line, in a single write (concurrent appenders never interleave).
    A write the disk cannot take (full, read-only) is a StorageError naming the file, and the
    part of the line that did go out is cut off again: a line is whole or absent, so a later
    append (after space is freed, or by a resume) never runs into half a line."""
    obj = record if isinstance(record, dict) else record.to_json()
    data = (json.dumps(obj) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise cannot_write("", path, exc) from None
    try:
        start = os.fstat(fd).st_size
        written = os.write(fd, data)
        if written != len(data):  # a full disk takes what fits and returns the count
            _cut_back(fd, start, written)
            raise cannot_write("", path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    except OSError as exc:
        raise cannot_write("", path, exc) from None
    finally:
        os.close(fd)


def _cut_back(fd: int, start: int, written: int) -> None:
    """Remove the `written` bytes of a short append at `start`, unless another writer has
    appended since (its line would go too)."""
    try:
        if os.fstat(fd).st_size == start + written:
            os.ftruncate(fd, start)
    except OSError:
        pass  # a resume drops a last line cut off mid-write (launcher/rundir.py check_metrics)


def last_logged_step(path: pathlib.Path) -> int:
    """The last step in a metrics file (-1: none), so that a resumed run logs each step once."""
    if not path.exists():
        return -1
    steps = [r.step for r in read_metrics(path) if isinstance(r, StepLine)]
    return max(steps, default=-1)


def write_json_atomic(path: str | pathlib.Path, data: dict[str, Any]) -> None:
    """Write `path` whole or not at all (a StorageError naming it if the disk refuses; the
    partial temporary file is removed, an earlier `path` left as it was)."""
    path = pathlib.Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise cannot_write("", path, exc) from None


def job_fingerprint(
    job_path: str,
    options: dict,
    job,
    consistency: str,
    model,
    link: SlowLinkConfig | None = None,
    batch: BatchConfig | None = None,
) -> str:
    """What determines a run's result, hashed: the job file's contents (an edited body is
    another job; a renamed or moved file is the same one), its options, batch sizes, seed,
    dataset size, the consistency mode, the model's tensors (names, dtypes, shapes), the
    slow-link settings that change what is trained (`link_settings`) and the adaptive batch
    policy with its knobs (`runtime/batching.py` `batch_settings`: the --batch-* flags over
    the job's `batch_policy` and `batch_options`; `batch` None: no flags given), and the
    job's autocast and loss scale."""
    shapes = [(n, str(p.dtype), tuple(p.shape)) for n, p in model.state_dict().items()]
    source = hashlib.sha256(pathlib.Path(job_path).read_bytes()).hexdigest()
    parts = [
        source,
        len(job.dataset),
        sorted(options.items()),
        job.micro_batch_size,
        job.global_batch_size,
        job.seed,
        consistency,
        shapes,
    ]
    settings = link_settings(link)
    if settings:
        # appended only when a way across the links is on: a run without one keeps the exact
        # fingerprint it had before these were hashed, so its old checkpoints stay resumable
        parts.append(sorted(settings.items()))
    adaptive = batch_settings(batch or BatchConfig(), job, consistency)
    if adaptive:  # likewise: a fixed-batch run keeps its fingerprint
        parts.append(["batch", sorted(adaptive.items())])
    if job.autocast or job.loss_scale is not None:  # likewise (runtime/precision.py)
        scale = loss_scale_settings(job.loss_scale)
        parts.append(["precision", job.autocast, sorted(scale.items()) if scale else None])
    return hashlib.sha256(json.dumps(parts, default=repr).encode()).hexdigest()


def link_settings(link: SlowLinkConfig | None) -> dict[str, Any]:
    """The slow-link settings that change what is trained, normalized (topk:0.10 is
    topk:0.1): none without --compress or --local-steps, where --sites has no effect and the
    others are refused; with one of them, its mode's settings (one not given: its default,
    hashed as if given) and the site layout, which decides whose sums are compressed or
    averaged (docs/consistency.md: residuals, pending messages and the outer state are
    training state, kept per site)."""
    if link is None or (link.compress == "none" and link.local_steps is None):
        return {}
    sites = None
    if link.sites is not None:  # spec order kept: a site's residuals are keyed by its index
        sites = [sorted(int(w) for w in part.split(",")) for part in link.sites.split("/")]
    if link.local_steps is not None:
        return {
            "sites": sites,
            "local_steps": int(link.local_steps),
            "outer_lr": float(link.effective_outer_lr),
            "outer_momentum": float(link.effective_outer_momentum),
            "outer_overlap": link.outer_overlap,
        }
    mode, keep = parse_compress(link.compress)
    return {
        "sites": sites,
        "compress": mode,
        "keep": keep,
        "sparse_optim": link.effective_sparse_optim,
        "pipeline": link.pipeline,
    }


def _spool_root(out: pathlib.Path) -> pathlib.Path:
    run = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:16]
    return pathlib.Path(tempfile.gettempdir()) / "shoal-spool" / run


def spool_dir(out: pathlib.Path) -> str:
    """A node-local directory where a stopping worker leaves its state for its successor: one
    per worker slot of one agent (the parent process, torchrun's agent, which outlives the
    workers it restarts, and the local rank). Keyed by the local rank alone, two agents on one
    host (sites in network namespaces, a local test) spooled into one file, and one of them
    failed on the other's rename."""
    return str(_spool_root(out) / f"{os.getppid()}-{os.environ.get('LOCAL_RANK', '0')}")


def clear_spool(out: pathlib.Path) -> None:
    """At a fresh start: this worker's spool is an earlier run's, and so is that of an agent no
    longer alive (a spool holds a whole training state: none is left behind in the temp
    folder); a live agent's is its own."""
    root = _spool_root(out)
    mine = pathlib.Path(spool_dir(out))
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        agent, dash, _ = d.name.partition("-")  # no dash: the earlier layout, by local rank
        live = dash and agent.isdigit() and _alive(int(agent))
        if d == mine or not live:
            shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


class StepLog:
    """Rank 0's view of the run: step lines and recovery events."""

    def __init__(self, out: pathlib.Path, group, job, t0: float):
        self.path = out / METRICS_FILE
        self.group, self.job, self.t0 = group, job, t0  # t0: the run's start (wall clock)
        self.logged = last_logged_step(self.path)

    def step(self, rec, trainer) -> None:
        if rec.step <= self.logged:
            return  # recomputed after a failure: already logged, and bitwise the same
        self.logged = rec.step
        g = self.group
        shares = zip(rec.micro_batches, rec.seconds_per_micro_batch, strict=True)
        line = StepLine(
            step=rec.step,
            loss=rec.loss,
            global_batch_size=rec.global_batch_size,
            micro_batch_size=self.job.micro_batch_size,
            step_time_s=rec.step_time_s,
            samples_per_s=rec.global_batch_size / rec.step_time_s,
            wall_time_s=time.time() - self.t0,
            redone=rec.redone,
            skipped=rec.skipped or None,
            grad_norm=rec.grad_norm,
            loss_scale=rec.loss_scale,
            generation=g.generation,
            workers=tuple(
                WorkerShare(g.ids[r], r, g.kinds[r], n, t) for r, (n, t) in enumerate(shares)
            ),
            noise_scale=rec.batch.noise_scale,
            similarity=rec.batch.similarity,
            lr_factor=rec.batch.lr_factor,
            **(rec.link or {}),  # --compress: the exchange across sites
        )
        append_line(self.path, line)

    def recovered(
        self, group, ended_at: float, lost: int, source: str, step: int | None = None
    ) -> None:
        """The recover line after a regroup's first step; `step`: the step training went on
        from, when that is not the last logged one (a restart from a checkpoint or scratch)."""
        now = time.time()
        event = MembershipEvent(
            event="recover",
            worker=group.ids[0],
            device=group.kinds[0],
            step=self.logged if step is None else step,
            wall_time_s=now - self.t0,
            recovery_time_s=now - ended_at,
            lost_steps=lost,
            detail=f"generation {group.generation}: {counted(group.world_size, 'worker')}, "
            f"state from {source}",
        )
        append_line(self.path, event)


def write_result(
    out, trainer, group, digest, wall_s, consistency, ckpt, fingerprint, samples_at_start
) -> dict:
    """result.json, by rank 0 of the last group. `wall_s` and `samples_at_start` cover this
    attempt (the run, or one --resume of it), whichever worker writes it: the time since its
    first group began training (worker start-up excluded) and the samples of the state it
    began with; samples_per_s is the samples trained since over that time
    (runtime/continuity.py `count_from`)."""
    scale = trainer.loss_scale  # runtime/precision.py
    result = RunResult(
        final_step=trainer.step,
        state_sha256=digest,
        wall_time_s=wall_s,
        samples_per_s=(trainer.samples_seen - samples_at_start) / wall_s,
        consistency=consistency,
        workers=tuple(group.kinds),
        checkpoint=ckpt,
        fingerprint=fingerprint,
        nonfinite_skipped=trainer.nonfinite_skipped,
        **(
            {"loss_scale": scale.scale, "loss_scale_backoffs": scale.backoffs}
            if scale.enabled
            else {}
        ),
    )
    data = result.to_json()
    data.setdefault("checkpoint", None)  # written as today: the key is there even without one
    write_json_atomic(pathlib.Path(out) / RESULT_FILE, data)
    return data
