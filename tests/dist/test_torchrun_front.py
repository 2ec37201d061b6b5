"""`shoal torchrun`: a refused input is one line and exit code 2 where plain torchrun ends with
its own traceback and report (exit 1), whether the front or the workers refuse it."""

import signal
import subprocess
import sys

import pytest

from shoal_testing import DIGITS, free_port

pytestmark = pytest.mark.dist


def _front(tmp_path, job, *flags):
    cmd = [sys.executable, "-m", "shoal", "torchrun", "--nproc-per-node", "2"]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    cmd += [str(job), "--steps", "3", "--out", str(tmp_path / "run"), *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_an_input_only_the_workers_can_refuse_is_one_line_and_exit_2(tmp_path):
    """The front cannot see that a job file is missing; both workers refuse it. Plain torchrun
    printed each worker's line, then its ChildFailedError traceback, and exited 1."""
    proc = _front(tmp_path, tmp_path / "missing.py")
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert errors == [f"shoal: error: job file '{tmp_path / 'missing.py'}' does not exist"]
    assert "Traceback" not in proc.stderr


def test_a_worker_that_fails_otherwise_is_one_line_naming_it_and_exit_1(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("def make_job(**options):\n    raise SystemExit(3)\n")
    proc = _front(tmp_path, job)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("shoal: run failed: worker rank ") and "exit code 3" in last
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr


def test_sigterm_to_the_front_stops_the_workers_in_one_line(tmp_path):
    """torchrun's agent raised its SignalException out of the front: a traceback, exit 1."""
    cmd = [sys.executable, "-m", "shoal", "torchrun", "--nproc-per-node", "2"]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    cmd += [DIGITS, "--steps", "100000", "--out", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:  # until both workers train
        lines.append(line)
        if sum("state at step 0" in seen for seen in lines) == 2:
            break
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, "".join(lines) + rest
    assert rest.splitlines()[-1] == "shoal: stopped by SIGTERM; the agent stopped the workers"
    assert "Traceback" not in rest
