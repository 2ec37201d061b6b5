"""`shoal torchrun` refuses what it can check before any worker starts: one line, exit 2."""

import json
import uuid

import pytest

from shoal.cli import main
from shoal_testing import DIGITS


@pytest.mark.parametrize(
    "front, job, message",
    [
        # the workers each printed it, then torchrun its traceback and report (exit 1)
        ([], ["--steps", "0"], "--steps must be >= 1, got 0"),
        # torchrun's AssertionError tracebacks (WorkerSpec, config_from_args)
        (["--nproc-per-node", "0"], [], "--nproc-per-node must be >= 1, got 0"),
        (["--nnodes", "3:1"], [], "--nnodes 3:1: expected N or MIN:MAX with 0 < MIN <= MAX"),
        # a RuntimeError traceback
        (["--nnodes", "1:2:3"], [], "--nnodes 1:2:3: expected N or MIN:MAX"),
        (["--nproc-per-node", "1000"], [], "--nproc-per-node 1000: at most "),
        # torchrun's usage block and message, two lines
        (["--bogus"], [], "unrecognized arguments: --bogus"),
        (["-m"], [], "shoal torchrun runs a job file (JOB.py), not -m or --no-python"),
        # each worker refused it, and the agent restarted them --max-restarts times first
        (["--max-restarts", "2"], ["-o", "nope=1"], "make_job does not take option(s): nope"),
        # what only the built job can judge: each worker refused it (shoal run's check_job)
        ([], ["--batch-policy", "pollux", "--local-steps", "4"], "--batch-policy pollux is adapt"),
        # the job's flags as argparse refuses them: its whole usage block came first
        ([], ["--threads", "x"], "argument --threads: invalid int value: 'x'"),
        ([], ["--nope"], "unrecognized arguments: --nope"),
        ([], ["--peer-timeout", "nan"], "argument --peer-timeout: invalid float value: 'nan'"),
        # a provider flag alone was told to add --provider local, which was then refused
        ([], ["--spot-trace", "t.csv"], "--spot-trace: the provider's flags are for `shoal run`"),
        ([], ["--quota", "k80:spot=1"], "--quota: the provider's flags are for `shoal run`"),
        ([], ["--provider", "local"], "--provider: the provider's flags are for `shoal run`"),
    ],
)
def test_refused_before_any_worker_starts(tmp_path, capsys, monkeypatch, front, job, message):
    def no_agent(args):
        raise AssertionError("the agent started")

    monkeypatch.setattr("torch.distributed.run.run", no_agent)
    argv = ["torchrun", "--nproc-per-node", "2", *front, DIGITS, "--steps", "3", *job]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"shoal: error: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_a_missing_job_file_is_refused_before_any_worker_starts(tmp_path, capsys, monkeypatch):
    def no_agent(args):
        raise AssertionError("the agent started")

    monkeypatch.setattr("torch.distributed.run.run", no_agent)
    missing = tmp_path / "missing.py"
    assert main(["torchrun", str(missing), "--steps", "3", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == f"shoal: error: job file '{missing}' does not exist\n"


RUN_IDS = [
    ([], None),  # one node, static, no --master-port: torchrun makes up a fresh id
    (["--standalone"], None),
    (["--master-port", "29500"], "none"),  # static on a given port: --rdzv-id's default
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--rdzv-id", "job-a"], "job-a"),
    (["--nnodes", "1:2", "--rdzv-id", "job-a"], "job-a"),
]


@pytest.mark.parametrize(("front", "run_id"), RUN_IDS)
def test_the_front_knows_the_job_id_torchrun_gives_the_workers(monkeypatch, front, run_id):
    """`agent_run_id` against torch's own `run`, stopped where it hands the agent its config:
    the --rdzv-id, or a fresh uuid where the front says None."""
    import torch.distributed.run as torchrun

    from shoal.runtime.torchrun_front import agent_run_id, parse

    args, _, max_nodes = parse([*front, DIGITS], "")
    ours = agent_run_id(args, max_nodes)
    given = []

    def launch(config, entrypoint):
        given.append(config.run_id)
        return lambda *job: None

    monkeypatch.setattr(torchrun, "elastic_launch", launch)
    monkeypatch.setattr(torchrun.torch.multiprocessing, "_set_thread_name", lambda name: None)
    torchrun.run(args)
    assert ours == run_id
    if ours is None:
        uuid.UUID(given[0])  # made up: a ValueError if it is not a fresh uuid
    else:
        assert given == [ours]


@pytest.mark.parametrize(("front", "run_id"), RUN_IDS)
def test_another_runs_checkpoints_are_refused_before_any_worker_starts(
    tmp_path, capsys, monkeypatch, front, run_id
):
    """The front knows the job id the agent will give the workers (each of them refused the
    checkpoints, after each of the agent's --max-restarts): another run's are refused once;
    the job's own (a node that joins late, a second agent of the same --rdzv-id) are not."""
    started = []
    monkeypatch.setattr("torch.distributed.run.run", started.append)
    out = tmp_path / "run"
    manifest = out / "checkpoints" / "ckpt-000000003.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"run": "another-run"}))
    argv = ["torchrun", "--nproc-per-node", "2", "--max-restarts", "3", *front, DIGITS]
    assert main([*argv, "--steps", "3", "--out", str(out)]) == 2
    said = f"shoal: error: {manifest.parent} already holds checkpoints of another run"
    assert capsys.readouterr().err.startswith(said) and not started
    if run_id is not None:  # the job's own: the agent starts
        manifest.write_text(json.dumps({"run": run_id}))
        assert main([*argv, "--steps", "3", "--out", str(out)]) == 0 and len(started) == 1


def test_a_resume_without_a_checkpoint_of_the_job_is_refused_before_any_worker_starts(
    tmp_path, capsys, monkeypatch
):
    """--resume onto another job's checkpoint (or onto none): each worker refused it as it
    loaded it, after the group formed and again after each of the agent's --max-restarts. The
    front reads the checkpoints as `shoal run` does; the job's own let the agent start."""
    import torch

    from shoal.launcher.rundir import config_fingerprint
    from shoal.launcher.torchrun import parse_config
    from shoal.runtime.checkpoint import save_checkpoint

    started = []
    monkeypatch.setattr("torch.distributed.run.run", started.append)
    out = tmp_path / "run"
    job = [DIGITS, "--steps", "3", "--out", str(out), "--resume"]
    argv = ["torchrun", "--nproc-per-node", "2", "--max-restarts", "3", *job]
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert said == f"shoal: error: --resume: no checkpoint found in {out / 'checkpoints'}\n"
    assert not started
    url = str(out / "checkpoints")
    save_checkpoint(url, 2, {"step": 2, "w": torch.ones(2)}, "0123456789abcdef")
    assert main(argv) == 2
    said = capsys.readouterr().err  # the workers' words for it, once
    manifest = out / "checkpoints" / "ckpt-000000002.json"
    assert said.startswith(f"shoal: error: checkpoint {manifest} belongs to a different job")
    assert said.count("\n") == 1 and not started
    fingerprint = config_fingerprint(parse_config(job))
    save_checkpoint(url, 3, {"step": 3, "w": torch.ones(2)}, fingerprint)
    assert main(argv) == 0 and len(started) == 1


@pytest.mark.parametrize("front", [False, True])
def test_a_worker_reports_its_error_where_torchrun_reads_it(tmp_path, capsys, monkeypatch, front):
    """The file is the one torchrun gives each worker; torch's own reader parses it (plain
    torchrun's report showed "To enable traceback see ..." as the root cause). Under the front
    the worker leaves stderr to the front, which says it once for every worker."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from shoal.launcher.torchrun import cli
    from shoal.runtime.torchrun_front import QUIET_ENV

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    if front:
        monkeypatch.setenv(QUIET_ENV, "1")
    missing = tmp_path / "missing.py"
    assert cli([str(missing), "--steps", "3", "--out", str(tmp_path / "run")]) == 2
    said = f"job file '{missing}' does not exist"
    assert capsys.readouterr().err == ("" if front else f"shoal: error: {said}\n")
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=2, error_file=str(error_file))
    assert failure.message == said and json.loads(error_file.read_text())["shoal"] is True


@pytest.mark.parametrize("under", ["", "/sub"])
def test_an_out_that_cannot_be_made_is_refused_before_any_worker_starts(
    tmp_path, capsys, monkeypatch, under
):
    """A file where --out goes: the agent started, each worker printed a traceback before its
    one line (`shoal run` refuses it before any worker starts)."""

    def no_agent(args):
        raise AssertionError("the agent started")

    monkeypatch.setattr("torch.distributed.run.run", no_agent)
    (tmp_path / "taken").write_text("mine\n")
    out = f"{tmp_path / 'taken'}{under}"
    assert main(["torchrun", DIGITS, "--steps", "3", "--out", out]) == 2
    why = "File exists" if not under else "Not a directory"
    assert capsys.readouterr().err == f"shoal: error: cannot write to --out '{out}': {why}\n"
    assert (tmp_path / "taken").read_text() == "mine\n"


def test_a_sigterm_while_the_job_is_checked_is_one_line_and_128_plus_15(tmp_path):
    """Building the job may take a while (a dataset read in make_job): a SIGTERM then ended
    the front silently, with the shell's 143 and no word of why."""
    import os
    import signal
    import subprocess
    import sys
    import time

    started = tmp_path / "started"
    job = tmp_path / "slow_job.py"
    job.write_text(
        "import pathlib, time\n"
        "def make_job():\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(60)\n"
    )
    cmd = [sys.executable, "-m", "shoal", "torchrun", "--nproc-per-node", "1", str(job),
           "--steps", "1", "--out", str(tmp_path / "out")]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ})
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines() == ["shoal: stopped by SIGTERM before any worker started"]
    assert not (tmp_path / "out").exists()  # nothing was started or written
