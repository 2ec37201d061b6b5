"""The run directory as one run's property: its lock, and what a run may do to what it holds.

One `shoal run` at a time owns a directory: `RunLock` holds an exclusive `flock` on
`OUT/.shoal.lock` (released by the kernel when the process dies, however it dies) and writes
its pid there, so a second run refuses with the holder's pid, and a lock left by a dead process
is taken over with a warning. `prepare_run` then decides, before any worker starts, what the
run will do to the directory's files:
- a resume of a run that already reached its --steps says so and changes nothing, if it is
  the same job: another job's result.json (its fingerprint) is refused, as its checkpoints are;
- a resume whose every checkpoint is unusable is an error (skip warnings on the console),
  never a fresh start, and so is one whose newest checkpoint is another job's (its fingerprint:
  job file, options, seed, ...), refused before any worker starts;
- a resume never deletes the previous `result.json` before it succeeds: it is set aside and
  put back if the run fails, and a resume that fails before training a step takes back the
  lines it appended to metrics.jsonl, so it leaves the directory as it found it (the worker
  logs are the exception: they say why it failed);
- a resume reads the metrics file first: an unreadable line is an error naming it, and a last
  line cut off by a crash mid-write is ended or dropped before the resume appends to it.
`run_in_directory` is the launcher's one call: lock, decide, run, read the result.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pathlib
import shlex
import signal
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

from shoal.config import RunConfig
from shoal.errors import RunFailed, UserError
from shoal.job import parse_options
from shoal.launcher.spec import RunSpec, load_job
from shoal.metrics.files import (
    METRICS_FILE,
    RESULT_FILE,
    SCENARIO_FILE,
    parse_line,
    parse_metrics_bytes,
)
from shoal.runtime.built import built_model
from shoal.runtime.checkpoint import OTHER_JOB, check_resumable, latest_checkpoint_step
from shoal.runtime.outputs import job_fingerprint

LOCK_FILE = ".shoal.lock"
# Ctrl-C or SIGTERM of the launcher: how long workers get to reach a step boundary and write
# the durable checkpoint before they are killed
GRACE_S = 60.0
SET_ASIDE = ".result.json.before-resume"
# what a run makes in its directory, a folder (True) or a file: one of the other type there
# failed the run midway with a traceback (a folder where the lock or a resume's metrics go, a
# file where the worker logs go)
_ENTRIES = ((LOCK_FILE, False), ("logs", True))
_RESUME_ENTRIES = ((METRICS_FILE, False), (RESULT_FILE, False), (SET_ASIDE, False))


class RunLock:
    """An exclusive lock on a run directory, held for the life of the launcher."""

    def __init__(self, out: str | pathlib.Path):
        self.path = pathlib.Path(out) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "another process"
            raise UserError(
                f"{self.path.parent} is in use by another shoal run ({who}); wait for it, "
                "or choose another --out"
            ) from None
        stale = _read_pid(fd)
        if stale and stale != os.getpid():
            sys.stderr.write(
                f"shoal: warning: {self.path.parent}: taking over the lock of pid {stale}, "
                "which is no longer running\n"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)  # an empty lock file is nobody's: no warning next time
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def check_entries(out: pathlib.Path, entries: tuple[tuple[str, bool], ...]) -> None:
    """Each entry of `out` the run will write is absent or of its type (before the lock)."""
    for name, folder in entries:
        path = out / name
        if path.exists() and not (path.is_dir() if folder else path.is_file()):
            kind = "a directory" if folder else "a regular file"
            raise UserError(f"{path} is not {kind}, as the run needs it: move it away")


def finished_result(out: pathlib.Path, result_name: str, steps: int) -> dict | None:
    """The earlier result in `out` if that run already reached `steps` steps, else None."""
    try:
        result = json.loads((out / result_name).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(result, dict) and isinstance(result.get("final_step"), int):
        return result if result["final_step"] >= steps else None
    return None


def config_fingerprint(config: RunConfig, job=None) -> str:
    """The fingerprint the workers of `config` compute (`outputs.job_fingerprint`), from the job
    (`job`, if the caller built it already) and its model built here as a worker builds them."""
    job = load_job(config) if job is None else job
    options = parse_options(list(config.options))
    model = built_model(job, "cpu")  # a bad one is refused here, in one line
    return job_fingerprint(
        config.job, options, job, config.consistency, model, config.link, config.batch
    )


def check_same_job(out: pathlib.Path, result: dict, config: RunConfig, job=None) -> None:
    """A finished run's result.json belongs to one job: a resume with another job file, other
    options, seed, consistency mode, slow-link or adaptive batch settings is refused, with the
    checkpoint load's message. A result without a fingerprint (written before it had one) is
    taken as it is. `job`: the job, if the caller built it already."""
    theirs = result.get("fingerprint")
    if not isinstance(theirs, str):
        return
    ours = config_fingerprint(config, job)
    if theirs != ours:
        raise UserError(
            f"{out / RESULT_FILE} belongs to a different job "
            f"(fingerprint {theirs[:12]}, expected {ours[:12]}): {OTHER_JOB}"
        )


@contextmanager
def unchanged_if_failed(out: pathlib.Path):
    """Around a resumed run: the previous result.json is set aside (the controller reads a
    result.json as "finished") and put back if the run writes none; and if the run fails
    before logging a step (another job's checkpoint, a bad flag in a worker), the membership
    lines it appended are cut off again. A failed resume leaves the directory as it was."""
    current, aside, metrics = out / RESULT_FILE, out / SET_ASIDE, out / METRICS_FILE
    if current.exists():
        os.replace(current, aside)
    size = metrics.stat().st_size if metrics.exists() else 0
    try:
        yield
    except BaseException:
        if metrics.exists() and b'"kind": "step"' not in _tail(metrics, size):
            os.truncate(metrics, size)
        raise
    finally:
        if aside.exists():
            if current.exists():
                aside.unlink()
            else:
                os.replace(aside, current)


def check_metrics(path: pathlib.Path) -> None:
    """Before a resume appends to the run's metrics file: a bad line is an error naming it,
    before any worker starts (the controller reads every line), and a last line cut off by a
    crash mid-write is ended (if whole) or dropped with a warning (if not), so that the resume's
    first line does not run into it and leave an unreadable line mid-file."""
    if not path.is_file():
        return
    data = path.read_bytes()
    for _ in parse_metrics_bytes(data, str(path)):
        pass
    cut = data.rfind(b"\n") + 1
    if cut == len(data):
        return
    try:
        parse_line(data[cut:].decode(), str(path))
    except (UserError, UnicodeDecodeError):
        sys.stderr.write(
            f"shoal: warning: {path}: dropping its last line, cut off mid-write: "
            f"{data[cut:][:60]!r}\n"
        )
        os.truncate(path, cut)
        return
    with open(path, "ab") as f:
        f.write(b"\n")


def _tail(path: pathlib.Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read()


def next_number(folder: pathlib.Path, prefix: str) -> int:
    """One more than the largest N among `folder`'s entries named `prefix-N` or `prefix-N-...`
    (numbered attempts' logs, earlier runs' results): nothing earlier is ever overwritten."""
    taken = [p.name.split("-")[1] for p in folder.glob(f"{prefix}-*")]
    return max((int(n) for n in taken if n.isdigit()), default=0) + 1


def set_aside_earlier_results(out: pathlib.Path) -> None:
    """A fresh run in a directory where an earlier one left results but no checkpoint: its
    metrics, result and scenario are renamed `earlier-N-<name>`, with a warning, never
    overwritten (nor left to read as this run's)."""
    names = (METRICS_FILE, RESULT_FILE, SCENARIO_FILE)
    found = [out / name for name in names if (out / name).exists()]
    if not found:
        return
    n = next_number(out, "earlier")
    for path in found:
        path.rename(out / f"earlier-{n}-{path.name}")
    names = ", ".join(p.name for p in found)
    sys.stderr.write(
        f"shoal: warning: {out} held an earlier run's {names}: kept as earlier-{n}-*\n"
    )


def run_in_directory(config: RunConfig, run: Callable[[], None], job=None) -> dict:
    """Run `run()` (the controller) holding the directory's lock; the run's result. A resume is
    checked first: a finished run of the same job is reported, not redone (another job's is an
    error); unusable checkpoints, or another job's, are an error. `job`: the job, if the caller
    built it already (`shoal run`'s check_run did; else the fingerprint builds it)."""
    out = pathlib.Path(config.out)
    check_entries(out, _ENTRIES + (_RESUME_ENTRIES if config.resume else ()))
    with RunLock(out), _signals_interrupt():
        if not config.resume:
            set_aside_earlier_results(out)  # check_run refused a directory with checkpoints
            run()
            return json.loads((out / RESULT_FILE).read_text())
        done = finished_result(out, RESULT_FILE, config.steps)
        if done is not None:
            check_same_job(out, done, config, job)
            sys.stderr.write(
                f"shoal: {out} already finished at step {done['final_step']} "
                f"(--steps {config.steps}); nothing to do, nothing changed\n"
            )
            return {**done, "earlier": True}  # (not this command's: the CLI says so)
        # another job's checkpoint is refused here, before any worker starts (a worker would
        # refuse it too, but only after the group formed, and the console would show its fail)
        step = check_resumable(checkpoint_dir(config), config_fingerprint(config, job))
        check_metrics(out / METRICS_FILE)
        sys.stderr.write(f"shoal: resuming {out} from the checkpoint of step {step}\n")
        with unchanged_if_failed(out):
            run()
        return json.loads((out / RESULT_FILE).read_text())


# what stops a run as Ctrl-C does: SIGTERM, and SIGHUP (its terminal closed, its ssh dropped),
# which killed the launcher and, by their parent-death signal, its workers, with no checkpoint
_STOPS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _signals_interrupt():
    """SIGTERM and SIGHUP of the launcher are handled as Ctrl-C: the workers wind down (see
    wind_down, which changes the handlers of SIGINT too). Every handler is put back after."""
    try:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, *_STOPS)}
        for sig in _STOPS:
            signal.signal(sig, signal.default_int_handler)
    except ValueError:  # not the main thread (a library caller): leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # (None: set outside Python, cannot be put back)
                signal.signal(sig, handler)


def checkpoint_dir(config: RunConfig) -> str:
    return config.checkpoint.dir or str(pathlib.Path(config.out) / "checkpoints")


# what a failure says when there is nothing to resume (shoal run and torchrun alike)
NO_CHECKPOINT = "no checkpoint was written, so it cannot be resumed"


def resume_hint(spec: RunSpec) -> str:
    """What a failure message may recommend: to resume only if a checkpoint exists, from which
    step, and the `shoal run` command that does it (whatever started the run: `shoal demo` has
    no --resume), with every flag of the run not at its default: those the fingerprint checks
    (a resume without them is refused: --compress, an adaptive --batch-policy and its knobs,
    ...) and the rest (--checkpoint-dir, ...), so that the run continues as it began."""
    config = spec.config
    step = latest_checkpoint_step(checkpoint_dir(config))
    if step is None:
        return NO_CHECKPOINT
    workers = spec.kinds
    if spec.tiers:  # with --provider
        workers = [f"{k}:{t}" for k, t in zip(spec.kinds, spec.tiers, strict=True)]
    words = ["shoal", "run", config.job, "--workers", ",".join(workers)]
    words += ["--steps", str(config.steps), "--resume", config.out]
    words += _flag_words(config, _implied_by_workers(spec))
    return f"continue from the checkpoint of step {step} with: {shlex.join(words)}"


# written by resume_hint itself (--resume DIR stands in for --out)
_HINT_OWN = {"job", "--steps", "--out", "--resume"}


def _implied_by_workers(spec: RunSpec) -> dict[str, str]:
    """Flags `shoal run` sets from --workers when they are not given: the batch policy's
    reference kinds (launcher/spec.py `with_implied_reference`) and the kinds a provider's
    scaler buys (cli/run.py)."""
    from shoal.perf.devices import load_devices  # numpy: only when a hint is written

    implied = {"--kinds": ",".join(dict.fromkeys(spec.kinds))}
    reference = spec.config.batch.reference
    if reference and load_devices().parse_workers(reference) == list(spec.kinds):
        implied["--batch-reference"] = reference
    return implied


def _flag_words(config, implied: dict[str, str]) -> list[str]:
    """`config`'s flags (nested sections included) whose values are not their defaults, nor
    what `shoal run` would set from --workers (`implied`), as command-line words."""
    words: list[str] = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            words += _flag_words(value, implied)
            continue
        flag = f.metadata.get("flag")
        if flag is None or flag in _HINT_OWN or implied.get(flag) == value:
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if value == default:
            continue
        if isinstance(value, bool):
            words.append(flag)
        elif isinstance(value, tuple | list):
            words += [w for item in value for w in (f.metadata.get("short", flag), str(item))]
        else:
            words += [flag, str(value)]
    return words


def wind_down(controller, grace_s: float = GRACE_S) -> str | None:
    """The launcher was interrupted: ask every member to leave at its next step boundary, as a
    notice does (each is logged as a `leave`); the members agree to leave at the same boundary
    and rank 0 writes a durable checkpoint there (runtime/loop.py). A worker still starting holds
    no state: it is killed, unlogged, as it never joined. The controller's loop goes on
    meanwhile, so that a member asked too late to leave with the others re-forms and leaves
    after one more step, until the group's members have all ended: what is left after that, or
    after `grace_s`, or at a second Ctrl-C, is killed. Returns the message for the user, or
    None when the run had finished (interrupted after its last step)."""
    again = _second_interrupt_stops()
    controller.pending.clear()  # no more injected events, no more joins
    for w in controller.workers.values():
        code = w.proc.poll()
        if w.resume_at is not None and code is None:  # stalled by an event: it cannot leave
            w.resume_at = None
            w.proc.send_signal(signal.SIGCONT)
        if w.state in ("member", "leaving") and code in (None, 0):
            # a graceful leave, logged as one (a Ctrl-C reaches the workers too: a member may
            # have left already, not yet reaped; one that left after a notice keeps its cause)
            if w.state == "member" or code is None:
                w.cause = w.cause or "interrupted: asked to leave at a step boundary"
            w.state = "leaving"
            if code is None:
                w.proc.send_signal(signal.SIGTERM)
        elif w.state == "starting":  # holds no state: nothing to save
            if code is None:
                w.proc.kill()
                w.proc.wait()
            # it never joined: nothing to log (one that a Ctrl-C, which reaches the workers
            # too, ended while it started was logged as lost: "exited with code -2")
            w.state = "gone"
    _wait_for_the_group(controller, time.monotonic() + grace_s, again)
    config = controller.spec.config
    if finished_result(pathlib.Path(config.out), RESULT_FILE, config.steps):
        return None  # interrupted after the last step: the run is done, result.json written
    how = ", and again: its workers stopped at once" if again else ""
    return f"interrupted at step {controller.steps_done}{how}; {resume_hint(controller.spec)}"


def _second_interrupt_stops() -> list[int]:
    """While the workers wind down, a repeated SIGTERM or SIGHUP is ignored (`timeout` forwards
    one, a closed terminal sends more), and a second Ctrl-C, recorded in the list returned,
    asks to stop at once (its KeyboardInterrupt ended the launcher in "shoal: interrupted",
    exit code 130, with no resume command and no leave logged)."""
    again: list[int] = []
    try:
        signal.signal(signal.SIGINT, lambda signum, _: again.append(signum))
        for sig in _STOPS:
            signal.signal(sig, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
    return again


def _wait_for_the_group(controller, deadline: float, again: list[int]) -> None:
    """Poll until every worker has ended, or every member of the group has (the last of them
    checkpointed: a worker still running is outside the group, e.g. stalled past its peers'
    timeout, and the wind-down waited out its grace for it), or the deadline, or a second
    Ctrl-C, which kills the workers still running before the message reads the checkpoints."""
    workers = controller.workers
    try:
        while True:
            ended = all(w.proc.poll() is not None for w in workers.values())
            group_over = all(workers[m].proc.poll() is not None for m in controller.members)
            controller.read_progress()
            controller.reap()  # once more after the last exit: its leave is logged too
            if ended or group_over or again or time.monotonic() >= deadline:
                break
            controller.admit_and_regroup()
            time.sleep(0.05)
    except (RunFailed, UserError):
        pass  # every worker is gone: the interruption's message says what to do
    if again:
        for w in controller.workers.values():
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
