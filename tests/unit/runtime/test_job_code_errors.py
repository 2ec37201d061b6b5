"""An error in the job's code: one line on the console, the traceback kept."""

import json

import pytest

from shoal.config import RunConfig
from shoal.errors import UserError
from shoal.runtime.job_errors import reports_errors


@reports_errors
def failing(config: RunConfig) -> int:
    return {}["boom"]  # the job's code raising, as far as the wrapper can tell


@pytest.mark.parametrize("launcher", ["shoal run", "torchrun"])
def test_the_traceback_goes_to_the_log_or_the_cause_file(tmp_path, monkeypatch, capsys, launcher):
    """Under torchrun stderr is the user's console: every rank printed the whole traceback.
    There the one line says where the traceback is; under shoal run stderr is the log."""
    monkeypatch.delenv("SHOAL_CAUSE_DIR", raising=False)
    if launcher == "shoal run":
        monkeypatch.setenv("SHOAL_WORKER_ID", "w3")
    else:
        monkeypatch.delenv("SHOAL_WORKER_ID", raising=False)
        monkeypatch.setenv("RANK", "3")
    with pytest.raises(UserError) as info:
        failing(RunConfig(job="job.py", steps=1, out=str(tmp_path)))
    cause = tmp_path / "logs" / "w3.cause.json"
    assert "KeyError" in json.loads(cause.read_text())["traceback"]
    err = capsys.readouterr().err
    if launcher == "shoal run":
        assert "Traceback" in err and "traceback in" not in str(info.value)
    else:
        assert "Traceback" not in err and f"(traceback in {cause})" in str(info.value)


@reports_errors
def refusing(config: RunConfig) -> int:
    raise UserError(f"cannot write to --out {config.out!r}: Not a directory")


def test_bad_input_is_one_line_under_torchrun_where_no_cause_file_can_go(
    tmp_path, monkeypatch, capsys
):
    """--out under a file: no cause file can be written, and each rank printed the traceback of
    its one-line refusal (bad input has no traceback to keep)."""
    monkeypatch.delenv("SHOAL_CAUSE_DIR", raising=False)
    monkeypatch.delenv("SHOAL_WORKER_ID", raising=False)
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="cannot write to --out"):
        refusing(RunConfig(job="job.py", steps=1, out=str(tmp_path / "file" / "run")))
    assert capsys.readouterr().err == ""
