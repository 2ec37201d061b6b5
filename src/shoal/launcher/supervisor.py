"""The controller of a local elastic run: its worker processes, injected events, and its poll.

It starts a process per worker (`shoal.worker`, configured through its environment) and polls:
the lines the workers append to metrics.jsonl, the autoscaler (`autoscale.Driver`, with
`--provider`), the injected events, the processes that ended, and the group's next generation
(`generations.py`: the membership decisions of the protocol in `shoal.runtime.membership`).
- a kill is a SIGKILL; a stall SIGSTOPs the worker and SIGCONTs it after its length;
- a notice sends SIGTERM: the worker leaves at the next step boundary, handing nothing over
  because every member already holds the state (and is SIGKILLed if its deadline passes);
- a new worker starts at once (up to the host's process limit; an add past it waits for a
  process to end) and is admitted once it has built its model; on a machine with GPUs each
  worker holds one of its own, or all train on the CPU (`gpus.py`).
Every wait has a deadline or a process to watch: when nothing can continue (no live worker and
no timed join still to come) the run fails at once, and a worker that stopped on an error in
the job's code (exit code 2, with its cause in `<wid>.cause.json`) stops the run with that
error. Membership events (join, notice, leave, fail) go to metrics.jsonl; rank 0 logs each
recovery; every one of them is also a console line. Each attempt at a run (a first run, each
`--resume`) keeps its worker logs in its own `logs/attempt-N/`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from shoal.console import Progress, counted
from shoal.errors import CAUSE_SUFFIX, STORAGE_PREFIX, RunFailed, UserError
from shoal.launcher.events import named
from shoal.launcher.generations import Generations
from shoal.launcher.gpus import GpuSlots, most_at_once, visible_gpus
from shoal.launcher.rundir import next_number, resume_hint, wind_down
from shoal.launcher.spec import RunSpec, Speeds, local_worker_limit
from shoal.metrics.files import METRICS_FILE, RESULT_FILE, parse_line
from shoal.metrics.training import MembershipEvent, StepLine
from shoal.runtime.membership import host_store
from shoal.runtime.outputs import append_line, last_logged_step

POLL_S = 0.05
ASKED_TO_LEAVE = "asked to leave at the next step boundary"  # a leave event's notice detail


@dataclass
class Worker:
    id: str
    kind: str
    proc: subprocess.Popen
    log: pathlib.Path
    state: str = "starting"  # starting -> member | leaving -> gone (a lost member: starting)
    kill_at: float | None = None  # a notice's deadline (monotonic seconds)
    resume_at: float | None = None  # a stalled (SIGSTOPped) worker's SIGCONT time
    cause: str = ""
    declared_lost: bool = False  # silent past the deadline; alive, and may come back


def attempt_dir(logs: pathlib.Path) -> pathlib.Path:
    """A new numbered folder for this attempt's worker logs: earlier attempts' are kept."""
    path = logs / f"attempt-{next_number(logs, 'attempt')}"
    path.mkdir(parents=True)
    return path


class Controller(Generations):
    def __init__(
        self, spec: RunSpec, speeds: Speeds, show_progress: bool, verbose: bool = False, driver=None
    ):
        super().__init__()  # the group's generations: members, generation, their timers
        self.spec, self.speeds, self.verbose = spec, speeds, verbose
        self.out = pathlib.Path(spec.config.out)
        self.logs = attempt_dir(self.out / "logs")
        self.metrics = self.out / METRICS_FILE
        # the listening socket must outlive the store that serves on it
        self.store, self.port, self._listener = host_store()
        self.t0 = time.time()
        self.workers: dict[str, Worker] = {}
        self.pending = list(spec.events)
        self.said_full = False  # said that an add waits for a process to end
        self.steps_done, self._read_upto = 0, 0  # bytes of metrics.jsonl already read
        if spec.config.resume and self.metrics.exists():
            # the earlier attempts' lines were shown (and measured) by their own launchers;
            # read from the start, they were printed again as new and fed the driver stale times
            self.steps_done = last_logged_step(self.metrics) + 1
            self._read_upto = self.metrics.stat().st_size
        self.progress = Progress(spec.config.steps) if show_progress else None
        self.finished = False
        self.alone_since: float | None = None  # when only workers declared lost were left
        self.timeout_s = spec.config.peer_timeout_s
        provider = spec.config.provider
        at_once = most_at_once(len(spec.kinds), provider.max_servers if provider.name else None)
        self.gpus = GpuSlots(visible_gpus(), at_once)  # which GPU each worker gets, if any
        self.rng = random.Random(spec.config.seed or 0)  # picks the victims of `kill random`
        # servers bought from a provider (`--provider`): autoscale.Driver, built on this loop
        self.driver = driver(self) if driver else None

    # -- processes -------------------------------------------------------------------------
    def running_processes(self) -> int:
        return sum(w.proc.poll() is None for w in self.workers.values())

    def alive(self, wid: str) -> bool:
        return self.workers[wid].proc.poll() is None

    def spawn(self, kind: str) -> Worker:
        wid = f"w{len(self.workers)}"
        env = dict(os.environ)
        env.update(
            SHOAL_STORE=f"127.0.0.1:{self.port}",
            SHOAL_WORKER_ID=wid,
            SHOAL_T0=repr(self.t0),
            SHOAL_CAUSE_DIR=str(self.logs),
            SHOAL_CONTROLLER_PID=str(os.getpid()),  # a worker ends with its controller
            LOCAL_RANK=str(len(self.workers)),
            **self.spec.worker_config(self.speeds.slowdown[kind]).to_env(),
            **self.gpus.env(wid, self.alive),
        )
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own sockets stay on loopback too
        # one string hash for every worker: a model built by iterating over a set of names is
        # then built alike everywhere (else each process orders it by a hash seed of its own)
        env.setdefault("PYTHONHASHSEED", "0")
        log = self.logs / f"{wid}.log"
        with open(log, "w") as f:
            # the configuration is in SHOAL_CONFIG; -P: the working directory is not put on
            # sys.path (a file there named like a module torch imports, nt.py, crashed it)
            cmd = [sys.executable, "-P", "-m", "shoal.worker"]
            proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
        self.workers[wid] = Worker(wid, kind, proc, log)
        return self.workers[wid]

    def event(self, name: str, w: Worker, detail: str = "", step: int | None = None) -> None:
        """Log a membership change; `step` is the steps completed when it took effect."""
        event = MembershipEvent(
            event=name,
            worker=w.id,
            device=w.kind,
            step=self.steps_done if step is None else step,
            wall_time_s=time.time() - self.t0,
            detail=detail,
        )
        append_line(self.metrics, event)

    def say(self, text: str) -> None:
        """One console line (stderr), clearing a progress bar drawn on a terminal first."""
        if not self.progress:
            return
        prefix = "\r\x1b[K" if self.progress.tty else ""
        sys.stderr.write(f"{prefix}shoal: {text}\n")
        sys.stderr.flush()

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        try:
            if self.driver:
                self.driver.open_initial()
            for kind in self.spec.kinds:
                self.spawn(kind)
            kinds = ", ".join(self.spec.kinds)
            starting = counted(len(self.spec.kinds), "worker")
            self.say(f"starting {starting} ({kinds}); logs in {self.logs}")
            if note := self.gpus.note():
                self.say(note)
            while not self.finished:
                self.read_progress()
                if self.driver:
                    self.driver.tick()
                self.fire_events()
                self.reap()
                if self.members:
                    self.admit_and_regroup()
                else:
                    self.start_group()
                time.sleep(POLL_S)
            self.read_progress()
            self.publish_done()
            self.report_unused()
            for w in self.workers.values():
                if w.resume_at is not None and w.proc.poll() is None:  # still stalled: end it
                    w.proc.send_signal(signal.SIGCONT)
                if w.declared_lost and w.proc.poll() is None:
                    # silent past its deadline, it holds nothing the run needs: the wait below
                    # held a finished run 30 s for a worker stopped (SIGSTOP) from outside
                    w.proc.kill()
                try:
                    w.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
            if self.driver:
                self.driver.finish()
        except BaseException as exc:
            stopped = wind_down(self) if isinstance(exc, KeyboardInterrupt) else None
            for w in self.workers.values():
                if w.proc.poll() is None:
                    w.proc.kill()
            if self.driver:  # the servers are released: the ledger ends here too
                self.driver.finish()
            if stopped:
                raise RunFailed(stopped) from None
            if not isinstance(exc, KeyboardInterrupt):
                raise  # (an interrupt after the last step: the run is done)
        finally:
            if self.progress:
                self.progress.close()

    def read_progress(self) -> None:
        """Read the metrics lines appended since the last poll (complete lines only)."""
        if not self.metrics.exists():
            return
        with open(self.metrics, "rb") as f:
            f.seek(self._read_upto)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
        self._read_upto += len(complete)
        for line in complete.decode().split("\n"):
            rec = parse_line(line, str(self.metrics))
            if self.driver:
                self.driver.observe(rec)
            if isinstance(rec, MembershipEvent):
                self.say(describe(rec))
            # (a loss scale's overflow skips are its way of working, silent as GradScaler's)
            if isinstance(rec, StepLine) and rec.skipped and rec.loss_scale is None:
                self.say(f"step {rec.step}: non-finite loss or gradient, its update skipped")
            if isinstance(rec, StepLine) and rec.step + 1 > self.steps_done:
                self.steps_done = rec.step + 1
                if self.progress:
                    self.progress.update(self.steps_done, rec.loss, rec.samples_per_s)

    def fire_events(self) -> None:
        now, elapsed = time.monotonic(), time.time() - self.t0
        for w in self.workers.values():
            if w.kill_at is not None and now >= w.kill_at and w.proc.poll() is None:
                w.proc.kill()
                w.cause = "notice deadline passed"
            if w.resume_at is not None and now >= w.resume_at:
                w.resume_at = None
                if w.proc.poll() is None:
                    w.proc.send_signal(signal.SIGCONT)
        due = [e for e in self.pending if e.due(self.steps_done, elapsed)]
        for e in due:
            self.pending.remove(e)
            if e.action == "add":
                # joins at one step (or before anyone leaves) all started at once: 1,000 adds
                # were 1,000 torch processes. Past the limit an add waits for a process to end.
                limit = local_worker_limit()
                if self.running_processes() >= limit or self.gpus.waiting(self.alive):
                    self.pending.append(e)
                    if not self.said_full:
                        self.said_full = True
                        full = f"{limit} worker processes running"
                        if self.gpus.ids:
                            full = f"each of the {len(self.gpus.ids)} GPUs held"
                        self.say(f"{full}: an add waits")
                    continue
                w = self.spawn(e.kind)
                self.say(f"step {self.steps_done}: starting {w.id} ({w.kind})")
                continue
            if e.worker == "random":
                alive = [
                    m
                    for m in self.members
                    if self.workers[m].state == "member"
                    and self.workers[m].proc.poll() is None
                    and not self.workers[m].cause
                ]
                # never the last member, and only a group that has trained since it formed
                if len(alive) < 2 or self.steps_done <= self.formed_at_step:
                    self.pending.append(e)
                    continue
                e = dataclasses.replace(e, worker=self.rng.choice(alive))
            w = self.workers.get(e.worker)
            if w is None or w.proc.poll() is not None or w.state == "gone":
                sys.stderr.write(f"shoal: warning: event '{e}': no such live worker; skipped\n")
                continue
            if e.action == "kill":
                w.cause = "killed (SIGKILL)"
                w.proc.kill()
            elif e.action == "stall":  # liveness, not the event, decides what follows
                w.proc.send_signal(signal.SIGSTOP)
                w.resume_at = now + e.deadline_s
                self.event("stall", w, f"SIGSTOP for {e.deadline_s:g}s")
            else:  # notice / leave: SIGTERM, then a hard kill at the deadline
                w.proc.send_signal(signal.SIGTERM)
                w.state = "leaving"
                if e.action == "leave":  # asked to (the scaler's smaller mix, or --events)
                    w.cause = w.cause or "at a step boundary, as asked"
                    self.event("notice", w, ASKED_TO_LEAVE)
                else:
                    deadline = f"{e.deadline_s:g}s" if e.deadline_s is not None else "no"
                    detail = f"leave at the next step boundary ({deadline} deadline)"
                    self.event("notice", w, detail)
                if e.deadline_s is not None:
                    w.kill_at = now + e.deadline_s

    def reap(self) -> None:
        for w in self.workers.values():
            code = w.proc.poll()
            if code is None or w.state == "gone":
                continue
            if code == 0 and (self.out / RESULT_FILE).exists():
                self.finished = True
            elif code == 0 and w.state == "leaving":
                # the boundary it left at: the controller may reap it steps later
                key = f"left/{w.id}"
                left = int(self.store.get(key)) if self.store.check([key]) else None
                self.event("leave", w, w.cause or "left at a step boundary after a notice", left)
            elif (code == 0 and w.state == "starting") or w.declared_lost:
                pass  # never admitted and the run is over, or its loss is logged already
            else:
                if code == 2:
                    self.user_error(w)
                self.event("fail", w, w.cause or f"exited with code {code}")
            w.state = "gone"
        if not self.finished and not self.can_continue():
            self.fatal()

    def can_continue(self) -> bool:
        """Whether a live worker, or a join still to come, can carry the run on. A step event
        cannot fire once every worker is gone (no step will complete); a timed join can. A
        worker declared lost is waited for one more timeout when nobody else is left, then
        killed: it may never wake up."""
        if any(w.state != "gone" and not w.declared_lost for w in self.workers.values()):
            self.alone_since = None
            return True
        if any(e.action == "add" and e.at_s is not None for e in self.pending):
            return True
        if self.driver and self.driver.waiting():  # servers booting or being asked for
            return True
        lost = [w for w in self.workers.values() if w.declared_lost and w.state != "gone"]
        self.alone_since = self.alone_since or time.monotonic()
        if lost and time.monotonic() - self.alone_since <= self.timeout_s:
            return True
        for w in lost:
            w.proc.kill()
            w.proc.wait()
            w.state = "gone"
        return False

    def report_unused(self) -> None:
        """Say what the run ended without: events that never fired, workers never admitted."""
        if self.pending:  # one line, however many
            sys.stderr.write(
                f"shoal: warning: {named(self.pending)} never fired: the run ended at step "
                f"{self.steps_done}\n"
            )
        for w in self.workers.values():
            if w.state == "starting":
                what = "declared lost, did not come back" if w.declared_lost else "not admitted"
                sys.stderr.write(
                    f"shoal: warning: {w.id} ({w.kind}) was {what} before the run ended\n"
                )

    def user_error(self, w: Worker) -> None:
        """A worker stopped on an error in the job's code or input: it would recur on any
        worker and after any resume, so the run stops with it (exit code 2)."""
        cause = self.logs / f"{w.id}{CAUSE_SUFFIX}"
        if cause.is_file():
            report = json.loads(cause.read_text())
            if self.verbose and report.get("traceback"):
                sys.stderr.write(report["traceback"])
            if report.get("storage"):
                self.storage_error(report["cause"])
            raise UserError(report["cause"])
        last = w.log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        if last[0].startswith(f"shoal: error: {STORAGE_PREFIX}"):  # no room for its cause file
            self.storage_error(last[0].removeprefix("shoal: error: "))
        if last[0].startswith("shoal: error: "):
            raise UserError(last[0].removeprefix("shoal: error: "))

    def storage_error(self, cause: str) -> None:
        """A worker could not write the run's files (a full or read-only disk): the run stops
        (exit code 1) with the way to resume once the disk takes writes again."""
        raise RunFailed(f"{cause}; {resume_hint(self.spec)}")

    def fatal(self) -> None:
        self.read_progress()  # the console lines of the last events first
        tails = []
        for w in self.workers.values():
            text = w.log.read_text(errors="replace").strip().splitlines()[-8:]
            tails.append(
                f"--- {w.id} ({w.cause or 'exit ' + str(w.proc.returncode)}):\n" + "\n".join(text)
            )
        with contextlib.suppress(OSError):  # a full disk: the line below still tells it
            (self.logs / "failure.txt").write_text("\n".join(tails) + "\n")
        unfired = (
            f"; {counted(len(self.pending), 'pending event')} cannot fire" if self.pending else ""
        )
        raise RunFailed(
            f"every worker is gone at step {self.steps_done}{unfired} (worker logs: "
            f"{self.logs}); {resume_hint(self.spec)}"  # the command last: copied as it is
        )


def describe(e: MembershipEvent) -> str:
    """The console line of a membership event."""
    who = f"{e.worker} ({e.device})" if e.device else e.worker
    at = f"step {e.step}: " if e.step is not None else ""
    if e.event == "recover":
        lost = e.lost_steps or 0
        return (
            f"{at}recovered in {e.recovery_time_s or 0:.2f}s, {lost} step"
            f"{'' if lost == 1 else 's'} lost ({e.detail})"
        )
    if e.event == "notice" and e.detail == ASKED_TO_LEAVE:  # not a revocation's notice
        return f"{at}{who} was {ASKED_TO_LEAVE}"
    verb = {
        "join": "joined",
        "leave": "left",
        "fail": "lost",
        "notice": "got a notice",
        "stall": "stalled",
    }
    return f"{at}{who} {verb.get(e.event, e.event)}" + (f": {e.detail}" if e.detail else "")
