"""Nothing lost that could be kept: a SIGTERM of the launcher and the last graceful leave write a
durable checkpoint, the failure message names its step, and --resume from it ends bitwise
where the uninterrupted run ends; a non-finite step is decided alike on every layout."""

import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

from shoal.job import build_job, load_job_file
from shoal.runtime.state import state_sha256
from shoal.runtime.trainer import Trainer
from shoal_testing import DIGITS, DIGITS_30, metrics, shoal_run

pytestmark = pytest.mark.dist
NONFINITE_JOB = str(pathlib.Path(__file__).with_name("nonfinite_job.py"))


def uninterrupted(job: str, steps: int, options: dict, **trainer) -> str:
    """The digest of an uninterrupted run, in this process (one worker is every layout)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers (--threads 1)
    try:
        t = Trainer(build_job(load_job_file(job), options, None), **trainer)
        while t.step < steps:
            t.train_step()
        return state_sha256(t.model, t.optimizer)
    finally:
        torch.set_num_threads(threads)


def start(out: pathlib.Path, steps: int, *extra: str, workers: str = "v100,k80", **popen):
    """`shoal run` in its own session (a signal to its process group is a terminal's)."""
    cmd = [sys.executable, "-m", "shoal", "run", DIGITS, "--workers", workers,
           "--steps", str(steps), "--out", str(out), *extra]  # fmt: skip
    popen = {"stderr": subprocess.PIPE, "stdout": subprocess.DEVNULL, **popen}
    return subprocess.Popen(cmd, text=True, start_new_session=True, **popen)


def wait_for_training(proc: subprocess.Popen, out: pathlib.Path) -> None:
    deadline = time.monotonic() + 120
    while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
        assert proc.poll() is None
        time.sleep(0.1)  # training has begun


def interrupt(out: pathlib.Path, steps: int, sig: int, group: bool) -> int:
    """Start `shoal run` on two workers, interrupt it once training has begun (`sig` to the
    launcher, or to its whole process group: Ctrl-C is SIGINT there, a closed terminal SIGHUP)
    and return the step whose durable checkpoint the message offers. Every worker left at that
    step boundary, logged as a leave: they were logged as failures, and the last one re-formed
    to train a step alone."""
    proc = start(out, steps)
    wait_for_training(proc, out)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-2000:]
    found = re.search(r"interrupted at step \d+; continue from the checkpoint of step (\d+)", err)
    assert found, err[-2000:]
    step = int(found.group(1))
    assert 0 < step < steps and (out / "checkpoints" / f"ckpt-{step:09d}.pt").exists()
    events = [r for r in metrics(out) if r["kind"] == "membership"]
    assert [(e["event"], e["step"]) for e in events] == [("leave", step)] * 2, events
    assert {e["worker"] for e in events} == {"w0", "w1"}
    assert all("interrupted" in e["detail"] for e in events)
    assert max(r["step"] for r in metrics(out) if r["kind"] == "step") == step - 1
    return step


def test_sigterm_of_the_launcher_checkpoints_and_resume_is_exact(tmp_path):
    out, steps = tmp_path / "run", 300
    interrupt(out, steps, signal.SIGTERM, group=False)
    result = shoal_run(out, "k80", steps, "--resume", str(out))
    assert result["state_sha256"] == uninterrupted(DIGITS, steps, {})


@pytest.mark.slow  # (the SIGTERM test above takes the same path, by another signal)
def test_ctrl_c_stops_every_worker_at_one_step_boundary(tmp_path):
    interrupt(tmp_path / "run", 300, signal.SIGINT, group=True)


def test_a_closed_terminal_stops_at_a_step_boundary_too(tmp_path):
    """SIGHUP (a terminal closed, an ssh session dropped) reaches the launcher and its workers:
    it killed them all at once, with no checkpoint and no line, and a resume went back to the
    last periodic checkpoint (10 minutes by default)."""
    interrupt(tmp_path / "run", 300, signal.SIGHUP, group=True)


def test_a_second_ctrl_c_stops_at_once_and_still_says_how_to_resume(tmp_path):
    """A second Ctrl-C while the workers wind down stops them at once: it ended the launcher
    in "shoal: interrupted", exit code 130, with no resume command."""
    out = tmp_path / "run"
    proc = start(out, 3000, "--checkpoint-every", "10")
    wait_for_training(proc, out)
    while not list((out / "checkpoints").glob("*.json")):  # one to resume from, whatever comes
        assert proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    found = re.fullmatch(
        r"shoal: run failed: interrupted at step \d+, and again: its workers stopped at once; "
        r"continue from the checkpoint of step (\d+) with: shoal run .*",
        last,
    )
    assert found and "Traceback" not in err, err[-2000:]
    assert (out / "checkpoints" / f"ckpt-{int(found.group(1)):09d}.json").exists()


def test_a_console_that_goes_away_does_not_stop_the_run(tmp_path):
    """`shoal run ... 2>&1 | head -3`: a broken pipe on stderr stopped the run at its next
    console line (its workers killed, no checkpoint), one on stdout turned a finished run into
    a traceback and exit code 1. The console's reader going away does not stop the run."""
    out = tmp_path / "run"
    proc = start(out, 30, workers="v100", stdout=subprocess.PIPE)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0
    assert json.loads((out / "result.json").read_text())["state_sha256"] == DIGITS_30


def test_ctrl_c_after_the_done_line_is_not_an_interruption(tmp_path):
    """A finished run's interpreter shuts down for most of a second (torch's teardown, after
    Python has reset its signal handlers): a Ctrl-C then killed it by SIGINT, and a run that
    had finished and said so exited as interrupted."""
    proc = start(tmp_path / "run", 30, workers="v100", stdout=subprocess.PIPE)
    assert proc.stdout.readline().startswith("done: 30 steps")
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:  # until it has exited
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]


def test_last_graceful_leave_writes_a_checkpoint_the_message_offers(tmp_path):
    """... and the command the message offers continues the run exactly, showing only its own
    events (a resume used to print the earlier attempt's events again, as if new)."""
    # the notice must land before the 40th step ends, or the run ends without a leave: paced
    # (0.02 s a micro-batch, 0.08 s a step; it changes no bit) it has about 2.8 s, not 0.3 s
    events, paced = "step 5: notice 0", {"SHOAL_EMULATED_HOST_S": "0.02"}
    err = shoal_run(tmp_path / "run", "v100", 40, "--events", events, env=paced, expect=1)
    found = re.search(r"checkpoint of step (\d+) with: (shoal run .*)$", err, re.M)
    assert found and int(found.group(1)) >= 5, err[-2000:]
    assert "notice" in err
    command = shlex.split(found.group(2))
    assert command[:2] == ["shoal", "run"]
    cmd = [sys.executable, "-m", "shoal", *command[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "notice" not in proc.stderr, proc.stderr[-2000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["state_sha256"] == uninterrupted(DIGITS, 40, {})


@pytest.mark.parametrize(
    "poison, where", [(37, "grad"), (45, "grad"), pytest.param(45, "loss", marks=pytest.mark.slow)]
)
def test_nonfinite_skip_is_the_same_on_every_layout(tmp_path, poison, where):
    """Sample 37 is in micro-batch 1 of steps 2 and 6 (w0's: 2 micro-batches each), sample 45
    in micro-batch 3 (w1's): a NaN on a rank other than 0 is one gloo's MAX would drop."""
    options = ["-o", f"poison={poison}", "-o", f"where={where}", "--on-nonfinite", "skip"]
    options += ["--max-micro-batches", "2"]
    result = shoal_run(tmp_path / "run", "v100,k80", 8, *options, job=NONFINITE_JOB)
    assert result["nonfinite_skipped"] == 2
    skipped = [r["step"] for r in metrics(tmp_path / "run") if r.get("skipped")]
    assert skipped == [2, 6]  # the step lines say which (and the console, from them)
    reference = uninterrupted(
        NONFINITE_JOB, 8, {"poison": poison, "where": where}, on_nonfinite="skip"
    )
    assert result["state_sha256"] == reference
