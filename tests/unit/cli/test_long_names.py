"""A path longer than a file name may be (255 bytes on most file systems) is bad input: one line,
exit code 2. pathlib's `exists()`, `is_file()` and `is_dir()` raise for it (Python 3.11), and
every command checks its paths that way: `simulate --workload`, `report DIR`, `run
--checkpoint-dir`, `run --resume` and `tune --out` ended in a traceback (exit 1), `run JOB` in a
line blaming shoal's own `job.py` for an OSError, and `transient --cluster` with a long inline
spec (some 30 items) in a traceback, where the spec was no file name at all."""

import pytest

from shoal.cli import main
from shoal_testing import DIGITS

LONG = "a" * 300


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--workload", LONG],
        ["simulate", "--workload", f"{LONG}/jobs.csv"],
        ["report", LONG],
        ["run", DIGITS, "--workers", "k80", "--steps", "2", "--out", "o", "--checkpoint-dir", LONG],
        ["run", DIGITS, "--workers", "k80", "--steps", "2", "--resume", LONG],
    ],
)
def test_a_name_too_long_is_one_line(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert one_line(capsys) == f"shoal: error: file name too long: '{LONG[:96]}...\n"
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_tune_out_too_long(tmp_path, monkeypatch, capsys):
    pytest.importorskip("optuna")
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "--memory-cap-mb", "100", "--out", LONG]) == 2
    assert one_line(capsys).startswith("shoal: error: file name too long: 'aaa")


@pytest.mark.parametrize("command", ["run", "torchrun"])
def test_a_job_file_name_too_long(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    workers = ["--workers", "k80"] if command == "run" else []
    assert main([command, f"{LONG}.py", *workers, "--steps", "2", "--out", "o"]) == 2
    err = one_line(capsys)
    assert err == f"shoal: error: job file '{LONG}.py': cannot read (File name too long)\n"


def test_a_long_inline_transient_spec_is_a_spec(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = ",".join(["1xk80@us-east1:spot"] * 40)  # 799 characters, no file's name
    assert main(["transient", "--cluster", spec, "--runs", "2", "--steps", "100"]) == 0
    assert "cluster: 40xk80@us-east1:spot" in capsys.readouterr().out


def test_a_transient_price_past_a_float_is_refused(capsys):
    # float() reads 400 nines as inf: the cost of every run was inf
    assert main(["transient", "--cluster", f"1xk80:spot={'9' * 400}", "--runs", "2"]) == 2
    assert "bad price '9999999999999999999999999999999999999...' (USD per hour" in one_line(capsys)
