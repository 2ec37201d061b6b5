"""`shoal torchrun` under torchrun's real agent: what only the workers can refuse is one line and
exit code 2 where plain torchrun ends with its own traceback and report (exit 1); any other
failure and a signal are one line too."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from shoal_testing import DIGITS, DIGITS_30, free_port

pytestmark = pytest.mark.dist


def _front(tmp_path, job, *flags):
    cmd = [sys.executable, "-m", "shoal", "torchrun", "--nproc-per-node", "2"]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    cmd += [str(job), "--steps", "3", "--out", str(tmp_path / "run"), *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_an_input_only_the_workers_can_refuse_is_one_line_and_exit_2(tmp_path):
    """A loss function that returns one loss per sample (no .mean()): only the first step can
    tell, so each worker refuses it. Plain torchrun printed each worker's line, then its
    ChildFailedError traceback and report, and exited 1."""
    job = tmp_path / "job.py"
    job.write_text(
        f"import dataclasses\nimport runpy\n\nimport torch.nn.functional as F\n\n"
        f"DIGITS = runpy.run_path({str(DIGITS)!r})\n\n\n"
        "def per_sample(model, batch):\n"
        "    x, y = batch\n    return F.cross_entropy(model(x), y, reduction='none')\n\n\n"
        "def make_job(**options):\n"
        "    return dataclasses.replace(DIGITS['make_job'](**options), loss_fn=per_sample)\n"
    )
    proc = _front(tmp_path, job)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr[-3000:]
    said = "shoal: error: Job.loss_fn must return a scalar (one-element) tensor, got a tensor of"
    assert errors[0].startswith(said)
    assert "Traceback" not in proc.stderr


def test_a_worker_that_fails_otherwise_is_one_line_naming_it_and_exit_1(tmp_path):
    job = tmp_path / "job.py"  # digits, but a worker (torchrun gave it a RANK) exits with 3
    job.write_text(
        f"import os\nimport runpy\n\nDIGITS = runpy.run_path({str(DIGITS)!r})\n\n\n"
        "def make_job(**options):\n"
        "    if 'RANK' in os.environ:\n        raise SystemExit(3)\n"
        "    return DIGITS['make_job'](**options)\n"
    )
    proc = _front(tmp_path, job)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("shoal: run failed: worker rank ") and "exit code 3" in last
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr


def test_a_disk_that_refuses_a_write_is_one_line_with_the_resume_and_exit_1(tmp_path):
    """Rank 0's metrics line of step 3 meets a full disk (its writer raises as on ENOSPC): not
    bad input (it was exit 2, with no way to resume), the run failed, resumable from step 2."""
    job = tmp_path / "job.py"
    job.write_text(
        "import errno\nimport os\nimport runpy\n\nimport shoal.runtime.outputs as outputs\n"
        f"from shoal.errors import cannot_write\n\nDIGITS = runpy.run_path({str(DIGITS)!r})\n"
        "REAL = outputs.append_line\n\n\n"
        "def full(path, record):\n"
        "    line = record if isinstance(record, dict) else record.to_json()\n"
        "    if line.get('kind') == 'step' and line.get('step') == 3:\n"
        "        raise cannot_write('', path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))\n"
        "    REAL(path, record)\n\n\n"
        "def make_job(**options):\n"
        "    if os.environ.get('RANK') == '0':\n        outputs.append_line = full\n"
        "    return DIGITS['make_job'](**options)\n"
    )
    proc = _front(tmp_path, job, "--steps", "4", "--checkpoint-every", "2")
    assert proc.returncode == 1, proc.stderr[-3000:]
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert proc.stderr.splitlines()[-1] == (
        f"shoal: run failed: cannot write {str(metrics)!r}: No space left on device; once the "
        "disk takes writes, continue from the checkpoint of step 2 with the same command and "
        "--resume"
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(180)
def test_sigterm_to_the_front_stops_the_workers_in_one_line(tmp_path):
    """torchrun's agent raised its SignalException out of the front: a traceback, exit 1."""
    cmd = [sys.executable, "-m", "shoal", "torchrun", "--nproc-per-node", "2"]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    cmd += [DIGITS, "--steps", "100000", "--out", str(tmp_path / "run")]
    metrics = tmp_path / "run" / "metrics.jsonl"
    with open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:  # until a step is written
            if metrics.exists() and '"kind": "step"' in metrics.read_text():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        err.seek(0)
        said = err.read()
    assert proc.returncode == 128 + signal.SIGTERM, said[-3000:]
    assert said.splitlines()[-1] == "shoal: stopped by SIGTERM; the agent stopped the workers"
    assert "Traceback" not in said


def test_a_console_that_goes_away_does_not_stop_the_workers(tmp_path):
    """`shoal torchrun ... 2>&1 | head -2`: the workers print to the agent's console, and each
    failed at its first line ("ready") with a BrokenPipeError, told as an error in the job's
    code (exit code 2): the run stopped before its first step."""
    cmd = [sys.executable, "-m", "shoal", "torchrun", "--nproc-per-node", "2"]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    cmd += [DIGITS, "--steps", "30", "--out", str(tmp_path / "run")]
    # without OMP_NUM_THREADS the agent warns before it starts the workers: a first line
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr.readline()
    proc.stderr.close()  # gone before the workers' first line
    assert proc.wait(timeout=300) == 0
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["state_sha256"] == DIGITS_30
