"""The controller of a local elastic run: processes, injected events, and group generations.

It owns the membership decisions of the protocol in `shoal.runtime.membership`:
- generation 0 is the initial workers;
- when a member dies (its process exits without finishing) the survivors' collective fails
  and they wait for the next generation; the controller publishes it once every surviving
  member has arrived;
- a notice sends SIGTERM: the worker leaves at the next step boundary, handing nothing over
  because every member already holds the state (and is SIGKILLed if its deadline passes);
- a new worker starts at once but is admitted only when it has built its model (`ready`), by
  asking the current group to regroup at the next step boundary, so joins cost the group one
  regroup, not a process start-up.
Membership events (join, leave, fail) go to metrics.jsonl; rank 0 logs each recovery.
"""

from __future__ import annotations

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

from shoal.console import Progress
from shoal.errors import RunFailed, UserError
from shoal.launcher.rundir import resume_hint, wind_down
from shoal.launcher.spec import RunSpec, Speeds
from shoal.metrics import METRICS_FILE, RESULT_FILE, MembershipEvent, StepLine, parse_line
from shoal.runtime.membership import host_store
from shoal.runtime.outputs import append_line

POLL_S = 0.05


@dataclass
class Worker:
    id: str
    kind: str
    proc: subprocess.Popen
    log: pathlib.Path
    state: str = "starting"  # starting -> member | leaving -> gone
    kill_at: float | None = None  # a notice's deadline (monotonic seconds)
    cause: str = ""


class Controller:
    def __init__(self, spec: RunSpec, speeds: Speeds, show_progress: bool):
        self.spec, self.speeds = spec, speeds
        self.out = pathlib.Path(spec.config.out)
        (self.out / "logs").mkdir(exist_ok=True)
        self.metrics = self.out / METRICS_FILE
        # the listening socket must outlive the store that serves on it
        self.store, self.port, self._listener = host_store()
        self.t0 = time.time()
        self.workers: dict[str, Worker] = {}
        self.members: list[str] = []
        self.generation = 0
        self.pending = list(spec.events)
        self.steps_done, self._read_upto = 0, 0  # bytes of metrics.jsonl already read
        self.progress = Progress(spec.config.steps) if show_progress else None
        self.finished = False
        self.formed_at_step = 0  # steps done when the current generation was published
        self.rng = random.Random(spec.config.seed or 0)  # picks the victims of `kill random`

    # -- processes -------------------------------------------------------------------------
    def spawn(self, kind: str) -> Worker:
        wid = f"w{len(self.workers)}"
        env = dict(os.environ)
        env.update(
            SHOAL_STORE=f"127.0.0.1:{self.port}",
            SHOAL_WORKER_ID=wid,
            SHOAL_T0=repr(self.t0),
            LOCAL_RANK=str(len(self.workers)),
            **self.spec.worker_config(self.speeds.slowdown[kind]).to_env(),
        )
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own sockets stay on loopback too
        log = self.out / "logs" / f"{wid}.log"
        with open(log, "w") as f:
            cmd = [sys.executable, "-m", "shoal.worker"]  # the configuration is in SHOAL_CONFIG
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

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        try:
            for kind in self.spec.kinds:
                self.spawn(kind)
            self.publish([w.id for w in self.workers.values()])
            while not self.finished:
                self.read_progress()
                self.fire_events()
                self.reap()
                self.admit_and_regroup()
                time.sleep(POLL_S)
            self.publish_done()
            for w in self.workers.values():
                try:
                    w.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
        except BaseException as exc:
            stopped = wind_down(self) if isinstance(exc, KeyboardInterrupt) else None
            for w in self.workers.values():
                if w.proc.poll() is None:
                    w.proc.kill()
            if stopped:
                raise RunFailed(stopped) from None
            raise
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
        due = [e for e in self.pending if e.due(self.steps_done, elapsed)]
        for e in due:
            self.pending.remove(e)
            if e.action == "add":
                self.spawn(e.kind)
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
                sys.stderr.write(
                    f"shoal: warning: event '{e.action} {e.worker}': no such live worker; skipped\n"
                )
                continue
            if e.action == "kill":
                w.cause = "killed (SIGKILL)"
                w.proc.kill()
            else:  # notice / leave: SIGTERM, then a hard kill at the deadline
                w.proc.send_signal(signal.SIGTERM)
                w.state = "leaving"
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
                self.event("leave", w, "left at a step boundary after a notice", left)
            elif code == 0 and w.state == "starting":
                pass  # never admitted and the run is over
            else:
                self.event("fail", w, w.cause or f"exited with code {code}")
                if code == 2:
                    self.user_error(w)
            w.state = "gone"
        if not self.finished and all(w.state == "gone" for w in self.workers.values()):
            if not self.pending:
                self.fatal()

    def admit_and_regroup(self) -> None:
        ready = [
            w
            for w in self.workers.values()
            if w.state == "starting"
            and w.proc.poll() is None
            and self.store.check([f"ready/{w.id}"])
        ]
        # a leaving member goes after the step that announced it: survivors then arrive
        broken = any(self.workers[m].state in ("gone", "leaving") for m in self.members)
        if ready and not broken and not self.store.check([f"regroup/{self.generation}"]):
            self.store.set(f"regroup/{self.generation}", "1")  # stop at the next boundary
        if not broken and not self.store.check([f"regroup/{self.generation}"]):
            return
        survivors = [m for m in self.members if self.workers[m].state == "member"]
        candidates = survivors + [w.id for w in ready]
        nxt = self.generation + 1
        if not candidates or not all(self.store.check([f"arrived/{nxt}/{c}"]) for c in candidates):
            return
        for w in ready:
            self.event("join", w, f"admitted in generation {nxt}")
        self.publish(candidates)

    def publish(self, ids: list[str]) -> None:
        if self.members:
            self.generation += 1
        for wid in ids:
            self.workers[wid].state = "member"
        self.members, self.formed_at_step = ids, self.steps_done
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

    def user_error(self, w: Worker) -> None:
        last = w.log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        if last[0].startswith("shoal: error: "):
            raise UserError(last[0].removeprefix("shoal: error: "))

    def fatal(self) -> None:
        tails = []
        for w in self.workers.values():
            text = w.log.read_text(errors="replace").strip().splitlines()[-8:]
            tails.append(
                f"--- {w.id} ({w.cause or 'exit ' + str(w.proc.returncode)}):\n" + "\n".join(text)
            )
        (self.out / "logs" / "failure.txt").write_text("\n".join(tails) + "\n")
        raise RunFailed(
            f"every worker is gone at step {self.steps_done}; "
            f"{resume_hint(self.spec.config)} (worker logs: {self.out / 'logs'})"
        )
