"""Failures end the run or heal it, never hang it, and name their cause (issue 18, part a)."""

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from shoal_testing import DIGITS, DIGITS_30, metrics, shoal_run

pytestmark = pytest.mark.dist


def test_the_pinned_digest_is_the_uninterrupted_runs():
    """DIGITS_30 was a digest copied from a run's output: derive it, as a worker runs it."""
    import torch

    from shoal.job import build_job, load_job_file
    from shoal.runtime.state import state_sha256
    from shoal.runtime.trainer import Trainer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers (--threads 1)
    try:
        trainer = Trainer(build_job(load_job_file(DIGITS), {}, None))
        while trainer.step < 30:
            trainer.train_step()
        assert state_sha256(trainer.model, trainer.optimizer) == DIGITS_30
    finally:
        torch.set_num_threads(threads)


def worker_pid(launcher: int, worker_id: str) -> int | None:
    """The pid of the launcher's child process that runs `worker_id`."""
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == launcher and f"SHOAL_WORKER_ID={worker_id}".encode() in env:
            return int(proc.name)
    return None


def logged(out: pathlib.Path) -> list[dict]:
    """The metrics lines written so far (complete lines only: the run is still writing)."""
    path = out / "metrics.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def steps_logged(out: pathlib.Path) -> int:
    return sum(1 for r in logged(out) if r["kind"] == "step")


def declared_lost(out: pathlib.Path, worker_id: str) -> bool:
    return any(
        r["kind"] == "membership" and r["event"] == "fail" and r["worker"] == worker_id
        for r in logged(out)
    )


@pytest.mark.timeout(90)
def test_stalled_worker_is_declared_lost_and_rejoins(tmp_path):
    """SIGSTOP one of three workers for longer than --peer-timeout, then SIGCONT: the group
    re-forms without it, it comes back as a newcomer, and the state is the uninterrupted one."""
    out = tmp_path / "stall"
    cmd = [sys.executable, "-m", "shoal", "run", DIGITS, "--workers", "3xv100", "--steps", "30",
           "--out", str(out), "--peer-timeout", "3"]  # fmt: skip
    env = {**os.environ, "SHOAL_EMULATED_HOST_S": "0.08"}  # paced, so the stall is mid-run
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped = None  # the pid of the worker while it is stopped
    try:
        while steps_logged(out) < 4:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        victim = worker_pid(proc.pid, "w1")
        os.kill(victim, signal.SIGSTOP)
        stopped = victim
        # peers time out after 3 s; it is declared lost 3 s after they regroup (about 6.2 s
        # here). Woken before that, it would rejoin its group in time and nothing would be
        # declared: it stays stopped until the fail line is written, however long that takes.
        while not declared_lost(out, "w1"):
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        os.kill(victim, signal.SIGCONT)
        stopped = None
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        if stopped:  # never leave it stopped, whatever failed
            os.kill(stopped, signal.SIGCONT)
    assert proc.returncode == 0, stderr[-3000:]
    assert DIGITS_30 in stdout
    events = [r for r in metrics(out) if r["kind"] == "membership"]
    lost = [e for e in events if e["event"] == "fail" and e["worker"] == "w1"]
    assert lost and "after its group ended (stalled?)" in lost[0]["detail"]
    assert "w1 (v100) lost: no response" in stderr  # the console says so
    # back in the group as a newcomer: it rejoined at step 10 of 30 here (SIGCONT at its fail
    # line, about 6.2 s after the stall at step 4), so the run does not end first even on a
    # loaded host
    rejoined = [e for e in events if e["event"] == "join" and e["worker"] == "w1"]
    assert rejoined, [(e["event"], e["worker"], e["step"]) for e in events]


def start_and_stop_w1(out: pathlib.Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """`shoal run` of two paced v100s (in its own session), and the pid of its worker w1,
    SIGSTOPped from outside once 4 steps are logged (a frozen VM: no event says so)."""
    cmd = [sys.executable, "-m", "shoal", "run", DIGITS, "--workers", "2xv100", "--out", str(out),
           *extra]  # fmt: skip
    env = {**os.environ, "SHOAL_EMULATED_HOST_S": "0.05"}  # paced: the stop lands mid-run
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    while steps_logged(out) < 4:
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    victim = worker_pid(proc.pid, "w1")
    os.kill(victim, signal.SIGSTOP)
    return proc, victim


@pytest.mark.slow  # 8-14 s: make test stays under its 10 minutes
@pytest.mark.timeout(90)
def test_a_run_ends_without_waiting_on_a_worker_declared_lost(tmp_path):
    """A worker stopped from outside is declared lost and the run finishes without it; the
    launcher then waited 30 s for it to exit before it killed it."""
    out = tmp_path / "run"
    proc, victim = start_and_stop_w1(out, "--steps", "30", "--peer-timeout", "2")
    try:
        while not (out / "result.json").exists():
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        finished = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
        assert time.monotonic() - finished < 15, stderr[-2000:]
    finally:
        proc.kill()
        with contextlib.suppress(ProcessLookupError):  # (gone when the launcher ended it)
            os.kill(victim, signal.SIGCONT)
    assert proc.returncode == 0 and DIGITS_30 in stdout, stderr[-3000:]


@pytest.mark.slow  # 8-14 s: make test stays under its 10 minutes
@pytest.mark.timeout(90)
def test_an_interrupt_does_not_wait_out_its_grace_for_a_stopped_worker(tmp_path):
    """SIGTERM of the launcher while a worker is stopped from outside: its peer times out,
    leaves alone at a step boundary with the checkpoint, and the run ends with the resume
    command; the wind-down waited out its whole grace (60 s) for the stopped worker."""
    out = tmp_path / "run"
    proc, victim = start_and_stop_w1(out, "--steps", "3000", "--peer-timeout", "3")
    try:
        proc.terminate()
        stopping = time.monotonic()
        _, stderr = proc.communicate(timeout=80)
        assert time.monotonic() - stopping < 30, stderr[-2000:]
    finally:
        proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGCONT)
    assert proc.returncode == 1, stderr[-3000:]
    assert "continue from the checkpoint of step" in stderr.strip().splitlines()[-1]


@pytest.mark.timeout(90)
def test_an_interrupt_wakes_a_worker_its_event_stalled(tmp_path):
    """Ctrl-C during an injected stall (`stall 1 60s`): the controller sends the stalled worker
    its SIGCONT at once, and both leave at one step boundary. It stayed stopped: its peer left
    alone after its timeout, and the launcher waited out its grace (60 s) for it."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "shoal", "run", DIGITS, "--workers", "2xv100", "--steps",
           "3000", "--out", str(out), "--events", "step 3: stall 1 60s",
           "--peer-timeout", "20"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        while not any(r["kind"] == "membership" for r in logged(out)):  # the stall's line
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        stopping = time.monotonic()
        _, stderr = proc.communicate(timeout=80)
        assert time.monotonic() - stopping < 15, stderr[-2000:]
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    left = [(r["worker"], r["step"]) for r in metrics(out) if r.get("event") == "leave"]
    assert sorted(w for w, _ in left) == ["w0", "w1"] and len({s for _, s in left}) == 1, left


@pytest.mark.timeout(60)
def test_total_loss_with_a_pending_event_ends(tmp_path):
    # the kill must fire before the add is due (both at one poll, the k80 would carry the run
    # on): paced at 0.01 s a micro-batch (0.04 s a step), steps 5 to 100 take 3.8 s, not 0.85 s
    events, paced = "step 5: kill 0; step 100: add k80", {"SHOAL_EMULATED_HOST_S": "0.01"}
    err = shoal_run(tmp_path, "v100", 200, "--events", events, env=paced, expect=1)
    last = err.strip().splitlines()[-1]
    assert last.startswith("shoal: run failed: every worker is gone at step")
    assert "1 pending event cannot fire" in last
    assert "w0 (v100) lost: killed (SIGKILL)" in err


BAD_LOSS = """
import torch
from shoal_digits import make_job as digits_job

def make_job(**options):
    job = digits_job(**options)
    def loss_fn(model, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(model(x), y[:1])  # raises: 16 inputs, 1 target
    import dataclasses
    return dataclasses.replace(job, loss_fn=loss_fn)
"""


@pytest.mark.timeout(60)
def test_error_in_user_code_inside_a_worker_is_one_line(tmp_path):
    """A loss function that raises fails inside every worker: the run stops with that cause
    (the user's file and line), exit code 2, no resume advice; --verbose adds the worker's
    traceback."""
    job = tmp_path / "bad_loss.py"
    job.write_text(BAD_LOSS)
    (tmp_path / "shoal_digits.py").write_text(pathlib.Path(DIGITS).read_text())
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = tmp_path / "run"
    err = shoal_run(out, "v100", 10, "--verbose", job=str(job), env=env, expect=2)
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"shoal: error: {job}:") and "ValueError: Expected input" in last
    assert "resume" not in err
    assert "Traceback (most recent call last)" in err  # --verbose
    cause = list((out / "logs" / "attempt-1").glob("*.cause.json"))
    assert cause  # the worker reported it to the controller, not only in its log


@pytest.mark.slow  # ~12 s; a checkpoint on a graceful stop stays in make test (test_durability)
def test_a_group_left_too_small_for_its_caps_keeps_its_state(tmp_path):
    """Two k80s capped at 2 micro-batches each; one is killed: the survivor cannot take the
    step's 4. It stops the run (one line, exit 2) but first checkpoints the state it holds, so
    --resume goes on from there (the state was thrown away: nothing to resume)."""
    out, caps = tmp_path / "run", ["--max-micro-batches", "2"]
    paced = {"SHOAL_EMULATED_HOST_S": "0.02"}  # unpaced, the 12 steps could end before the kill
    err = shoal_run(out, "k80,k80", 12, *caps, "--events", "step 5: kill 1", env=paced, expect=2)
    last = err.strip().splitlines()[-1]
    assert "cannot take 4 micro-batches" in last and "is checkpointed" in last, last
    step = int(last.split("the state of step ")[1].split()[0])
    assert 5 <= step < 12 and (out / "checkpoints" / f"ckpt-{step:09d}.pt").exists()
    resumed = shoal_run(out, "k80,k80", 12, *caps, "--resume", str(out))
    plain = shoal_run(tmp_path / "plain", "k80,k80", 12, *caps)
    assert resumed["state_sha256"] == plain["state_sha256"]
