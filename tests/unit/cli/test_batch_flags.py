"""Bad adaptive-batch input to `shoal run` is one line on stderr and exit code 2, before any
worker starts; so is a knob the run's policy does not read."""

import os
import pathlib
import subprocess
import sys

import pytest

from shoal.cli import main

DIGITS = str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "digits.py")  # b = 16


# the policy's own messages are control.batch_policy's to word: the needle is only the bad
# value the message must name, so that an unrelated one-line error does not pass
@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--batch-policy", "nope"], "nope"),
        (["--batch-policy", "jabas", "--batch-bounds", "30:256"], "30:256"),
        (["--batch-policy", "jabas", "--batch-bounds", "256:32"], "256:32"),
        (["--batch-policy", "jabas", "--batch-bounds", "lots"], "lots"),
        (["--batch-policy", "jabas", "--batch-option", "gamma=1.5"], "gamma"),
        (["--batch-policy", "jabas", "--batch-option", "gamma=-1"], "gamma"),
        (["--batch-policy", "jabas", "--batch-every", "0"], "--batch-every"),
        (["--batch-policy", "jabas", "--consistency", "fast"], "--consistency exact"),
        (["--batch-policy", "pollux", "--batch-reference", "v100,tpu9"], "tpu9"),
        # inf (or 1e400) was taken: a throughput model whose every step's exchange never ends
        (["--batch-policy", "pollux", "--batch-sync", "inf"], "'inf' (a finite number)"),
        (["--batch-policy", "shoal", "--batch-sync", "1e400"], "'1e400' (a finite number)"),
        # the digits job's batch is 64: its first steps would run outside the bounds
        (["--batch-policy", "jabas", "--batch-bounds", "128:256"], "global_batch_size 64"),
    ],
)
def test_bad_batch_input_is_one_line_and_exit_2(capsys, tmp_path, extra, needle):
    argv = ["run", DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path), *extra]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a flag's value itself
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "metrics.jsonl").exists()  # refused before any worker started


# a --batch-* knob the fixed policy does not read (it reads none) was silently ignored (only
# --batch-bounds warned): the run was not the adaptive one asked for
KNOBS = {
    "--batch-bounds": "32:256",
    "--batch-every": "5",
    "--lr-scaling": "sqrt",
    "--batch-reference": "v100",
    "--batch-sync": "0",  # given, even at its default value
    "--batch-option": "gamma=0.2",
}


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("policy", [[], ["--batch-policy", "fixed"]])
@pytest.mark.parametrize("flag", list(KNOBS))
def test_a_knob_of_the_adaptive_policies_is_refused_with_the_fixed_one(
    capsys, tmp_path, flag, policy
):
    argv = ["run", DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path)]
    assert main([*argv, *policy, flag, KNOBS[flag]]) == 2
    source = "--batch-policy" if policy else "the default policy"
    assert one_line(capsys) == (
        f"shoal: error: {flag} needs an adaptive --batch-policy ({source} is fixed)"
    )
    assert not (tmp_path / "metrics.jsonl").exists()  # refused before any worker started


def test_every_knob_given_with_the_fixed_policy_is_named(capsys, tmp_path):
    argv = ["run", DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path)]
    assert main([*argv, "--batch-every", "5", "--lr-scaling", "sqrt"]) == 2
    assert "--batch-every and --lr-scaling need an adaptive" in one_line(capsys)


def job_with_policy(tmp_path, policy: str) -> str:
    """A job file: the digits job with its own `batch_policy`."""
    path = tmp_path / f"job_{policy}.py"
    path.write_text(
        "import dataclasses, runpy\n"
        f"digits = runpy.run_path({DIGITS!r})\n"
        "def make_job():\n"
        f"    return dataclasses.replace(digits['make_job'](), batch_policy={policy!r})\n"
    )
    return str(path)


def test_the_jobs_own_fixed_policy_refuses_a_knob_and_an_adaptive_one_takes_it(capsys, tmp_path):
    from shoal.config import BatchConfig
    from shoal.job import build_job, load_job_file
    from shoal.runtime.batching import check_batch

    job = job_with_policy(tmp_path, "fixed")
    argv = ["run", job, "--workers", "v100", "--steps", "2", "--out", str(tmp_path / "out")]
    assert main([*argv, "--batch-every", "5"]) == 2
    assert one_line(capsys) == (
        "shoal: error: --batch-every needs an adaptive --batch-policy "
        "(the job's batch_policy is fixed)"
    )
    # a flag's adaptive policy over the job's fixed one reads it, and so does the job's own
    fixed = build_job(load_job_file(job), {}, None)
    check_batch(BatchConfig(policy="jabas", every=5), fixed, "exact")
    check_batch(BatchConfig(), fixed, "exact")  # the defaults are not given: nothing to say
    jabas = build_job(load_job_file(job_with_policy(tmp_path, "jabas")), {}, None)
    check_batch(BatchConfig(every=5, lr_scaling="sqrt", options=("gamma=0.2",)), jabas, "exact")
    assert capsys.readouterr().err == ""


def test_a_throughput_knob_with_a_policy_weighing_none_is_warned_about(capsys):
    """--batch-reference and --batch-sync: read by pollux and shoal only. With jabas or schedule
    they change nothing, and are said to (a warning: one set of knobs may serve several
    policies' runs, as tests/dist/test_adaptive_batch.py's and bench/adaptive_batch.py's do)."""
    from shoal.config import BatchConfig
    from shoal.job import build_job, load_job_file
    from shoal.runtime.batching import check_batch

    job = build_job(load_job_file(DIGITS), {}, None)
    check_batch(BatchConfig("jabas", reference="v100", sync=1.0), job, "exact")
    assert one_line(capsys) == (
        "shoal: warning: --batch-reference and --batch-sync have no effect with --batch-policy "
        "jabas: only pollux and shoal weigh throughput"
    )
    check_batch(BatchConfig("schedule", sync=0.0, options=("ramp=64@0",)), job, "exact")
    assert "--batch-sync has no effect with --batch-policy schedule" in one_line(capsys)
    for policy in ("pollux", "shoal"):
        check_batch(BatchConfig(policy, reference="v100", sync=1.0), job, "exact")
    check_batch(BatchConfig("jabas"), job, "exact")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "policy, knobs",
    [
        # every knob but the throughput model's; the reference shoal run implies from
        # --workers is not one given: no warning
        ("jabas", ["--batch-bounds", "32:256", "--batch-every", "1", "--lr-scaling", "sqrt",
                   "--batch-option", "gamma=0.2"]),
        ("pollux", ["--batch-reference", "v100", "--batch-sync", "1", "--batch-every", "1"]),
    ],
)  # fmt: skip
def test_the_knobs_a_policy_reads_are_taken(capfd, tmp_path, policy, knobs):
    argv = ["run", DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path)]
    assert main([*argv, "--batch-policy", policy, *knobs]) == 0
    assert "warning" not in capfd.readouterr().err
    assert (tmp_path / "result.json").exists()


def test_a_torchrun_worker_refuses_a_knob_the_policy_does_not_read(tmp_path):
    """No launcher checks a torchrun worker's flags with the job: the worker does, before it
    joins any group."""
    env = {k: v for k, v in os.environ.items() if k not in ("SHOAL_CONFIG", "SHOAL_WORKER_ID")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    argv = [DIGITS, "--steps", "2", "--out", str(tmp_path), "--lr-scaling", "sqrt"]
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.worker", *argv], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "shoal: error: --lr-scaling needs an adaptive --batch-policy (the default policy is fixed)"
    ], proc.stderr
