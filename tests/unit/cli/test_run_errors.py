"""Bad input to `shoal run` is one line on stderr and exit code 2, before any worker starts."""

import pathlib

import pytest

from shoal.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[3]
DIGITS = str(ROOT / "examples" / "digits.py")


def run(capsys, *argv):
    try:
        code = main(["run", *argv])
    except SystemExit as exc:  # argparse refuses a flag's value itself
        code = exc.code
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["-o", "global_batch_size=60"], "not a multiple of micro_batch_size"),
        (["-o", "micro_batch_size=4000", "-o", "global_batch_size=4000"], "fewer than one micro"),
        (["-o", "no_such_option=1"], "does not take option"),
    ],
)
def test_bad_job_options(capsys, tmp_path, extra, needle):
    code, err = run(
        capsys, DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path), *extra
    )
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("cap", ["0", "1"])  # 2 workers x 1 < M = 4 micro-batches
def test_cap_that_cannot_hold_the_step(capsys, tmp_path, cap):
    code, err = run(
        capsys, DIGITS, "--workers", "v100,k80", "--steps", "2", "--out", str(tmp_path),
        "--max-micro-batches", cap,
    )  # fmt: skip
    assert code == 2 and "--max-micro-batches" in err and len(err.strip().splitlines()) == 1


def test_bad_emulation_yardstick(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SHOAL_EMULATED_HOST_S", "-3")
    code, err = run(capsys, DIGITS, "--workers", "v100,k80", "--steps", "2", "--out", str(tmp_path))
    assert code == 2 and "SHOAL_EMULATED_HOST_S" in err and len(err.strip().splitlines()) == 1


def test_unknown_device_kind(capsys, tmp_path):
    code, err = run(
        capsys, DIGITS, "--workers", "v100,tpu9", "--steps", "2", "--out", str(tmp_path)
    )
    assert code == 2 and "unknown device kind 'tpu9'" in err and err.count("\n") == 1


def test_job_file_without_make_job(capsys, tmp_path):
    job = tmp_path / "nojob.py"
    job.write_text("x = 1\n")
    code, err = run(
        capsys, str(job), "--workers", "v100", "--steps", "2", "--out", str(tmp_path / "o")
    )
    assert code == 2 and "does not define make_job" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "name, content, needle",
    [
        # was "<shoal's own>/job.py:166: SyntaxError: ...": compile() names no file
        ("binary.py", b"\x7fELF\x00\x01junk", "is not Python source (source code string "),
        ("job.txt", b"def make_job(): pass\n", "': not a .py file"),  # was no reason at all
    ],
)
def test_job_file_that_is_not_python(capsys, tmp_path, name, content, needle):
    job = tmp_path / name
    job.write_bytes(content)
    out = tmp_path / "o"
    code, err = run(capsys, str(job), "--workers", "v100", "--steps", "2", "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"shoal: error: job file {str(job)!r} ") or (
        err.startswith(f"shoal: error: cannot import job file {str(job)!r}")
    )
    assert needle in err and "shoal/job.py" not in err and not out.exists()


def test_missing_job_file(capsys, tmp_path):
    code, err = run(
        capsys,
        str(tmp_path / "nope.py"),
        "--workers",
        "v100",
        "--steps",
        "2",
        "--out",
        str(tmp_path),
    )
    assert code == 2 and "does not exist" in err


def test_unwritable_out(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, err = run(
        capsys, DIGITS, "--workers", "v100", "--steps", "2", "--out", str(blocker / "sub")
    )
    assert code == 2 and "cannot write to --out" in err and err.count("\n") == 1


def test_bad_flag_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", DIGITS, "--steps", "x"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("flag", ["--replan-every", "--threads", "--steps"])
def test_bad_count_fails_before_any_worker(capsys, tmp_path, flag):
    """Caught by the configuration itself: no worker is started, nothing is written."""
    code, err = run(
        capsys, DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path / "o"), flag, "0"
    )
    assert code == 2 and f"{flag} must be >= 1, got 0" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "workers, flag, missing",
    [
        ("v100", ["--outage", "v100:on_demand:0-100"], "v100:on_demand"),
        ("2xv100:spot", ["--quota", "v100:spot=1"], "v100:spot"),  # a quota below the servers
    ],
)
def test_no_capacity_at_launch_is_the_error_told(capsys, tmp_path, workers, flag, missing):
    """The run stops before any step, and before it takes the run directory: the missing
    scenario it cannot write (no step measured) used to replace the cause with 'scenario:
    host_s must be > 0', and a refusal at launch left metrics.jsonl behind."""
    code, err = run(
        capsys, DIGITS, "--workers", workers, "--steps", "2", "--out", str(tmp_path / "o/p"),
        "--provider", "local", *flag,
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert f"the provider has no {missing} capacity at launch" in err
    assert list(tmp_path.iterdir()) == []  # refused before the launch, no empty --out left


def test_thread_count_past_the_bound(capsys, tmp_path):
    """100000 threads crashed the worker in OpenMP (exit code -11, the run 'failed')."""
    code, err = run(
        capsys, DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path / "o"),
        "--threads", "100000",
    )  # fmt: skip
    assert code == 2 and "--threads must be <= 1024, got 100000" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "seconds, needle",
    [
        ("inf", "argument --peer-timeout: invalid float value: 'inf' (a finite number)"),
        ("1e300", "--peer-timeout must be > 0 and at most 86,400 seconds"),
        ("1e10", "--peer-timeout must be > 0 and at most 86,400 seconds"),
    ],
)
def test_peer_timeout_past_the_bound(capsys, tmp_path, seconds, needle):
    """inf and 1e300 failed every worker with 'membership.py:79: OverflowError'; 1e10 overflowed
    inside torch's collectives and the run hung."""
    code, err = run(
        capsys, DIGITS, "--workers", "v100,v100", "--steps", "2", "--out", str(tmp_path / "o"),
        "--peer-timeout", seconds,
    )  # fmt: skip
    assert code == 2 and needle in err
    assert err.count("\n") == 1 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("under", ["", "sub"])
def test_checkpoint_dir_that_is_a_file(capsys, tmp_path, under):
    """A file in its place trained every step, then failed writing the checkpoint with
    'checkpoint.py:63: FileExistsError'."""
    blocker = tmp_path / "file"
    blocker.write_text("kept")
    code, err = run(
        capsys, DIGITS, "--workers", "v100", "--steps", "2", "--out", str(tmp_path / "o"),
        "--checkpoint-dir", str(blocker / under),
    )  # fmt: skip
    assert code == 2 and f"{blocker} is not a directory" in err and err.count("\n") == 1
    assert blocker.read_text() == "kept" and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sparse-optim", "lazy"], "--sparse-optim needs --compress"),
        (["--sparse-optim", "dense", "--sites", "0/1"], "--sparse-optim needs --compress"),
        (["--outer-lr", "0.5"], "--outer-lr needs --local-steps"),
        (["--outer-momentum", "0"], "--outer-momentum needs --local-steps"),
        (["--compress", "topk:0.1", "--outer-lr", "0.7"], "--outer-lr needs --local-steps"),
    ],
)
def test_a_slow_link_setting_without_its_mode_is_one_line_and_exit_2(
    capsys, tmp_path, monkeypatch, extra, message
):
    """Given without the mode that uses it, the flag was ignored: its default could not be
    told from a value given. `shoal run` and the torchrun entry refuse it alike."""
    from shoal.launcher.torchrun import cli

    monkeypatch.delenv("SHOAL_CONFIG", raising=False)
    out = str(tmp_path / "o")
    code, err = run(capsys, DIGITS, "--workers", "v100", "--steps", "2", "--out", out, *extra)
    assert code == 2 and err == f"shoal: error: {message}\n"
    assert cli([DIGITS, "--steps", "2", "--out", out, *extra]) == 2
    assert capsys.readouterr().err == f"shoal: error: {message}\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "item", ["lr=1e400", "lr=-1e999", "lr=[0.1, 1e400]", "lr={'a': 1e400}", "lr=1e400j"]
)
def test_job_option_past_a_floats_range_is_refused(capsys, tmp_path, item):
    """A number literal past a float's range reached make_job as inf; refused before any worker
    (the --resume of no directory, checked after the job, is not reached)."""
    from shoal.errors import UserError
    from shoal.job import parse_options

    with pytest.raises(UserError, match=r"^-o lr=.*: a number out of range"):
        parse_options([item])
    code, err = run(capsys, DIGITS, "--workers", "v100", "--steps", "2", "-o", item,
                    "--resume", str(tmp_path / "none"))  # fmt: skip
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"shoal: error: -o {item}: a number out of range")
    # the words are no literal: a string, as before; a number in range is a number
    assert parse_options(["lr=inf", "x=nan", "y=1e308"]) == {"lr": "inf", "x": "nan", "y": 1e308}


def test_batch_option_past_a_floats_range_names_its_flag(capsys, tmp_path):
    policy = ["--batch-policy", "jabas", "--batch-option", "gamma=1e400"]
    none = str(tmp_path / "none")
    code, err = run(capsys, DIGITS, "--workers", "v100", "--steps", "2", *policy, "--resume", none)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("shoal: error: --batch-option gamma=1e400: a number out of range")
