"""`shoal report DIR` through the CLI: exit codes and one-line errors."""

import json

import pytest

from shoal.cli import main
from shoal.report.load import load_run
from unit.report.synthetic_run import write_synthetic_run


def test_report_command_writes_page(tmp_path, capsys):
    directory = write_synthetic_run(tmp_path / "run", num_steps=8)
    assert main(["report", str(directory)]) == 0
    assert (directory / "report.html").is_file()
    assert sorted(p.name for p in (directory / "report").iterdir()) == [
        "loss.png",
        "share.png",
        "throughput.png",
        "timeline.png",
    ]
    assert capsys.readouterr().out.strip() == f"wrote {directory / 'report.html'}"


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def test_missing_directory_is_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in _one_line_error(capsys)


def test_missing_metrics_is_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "metrics.jsonl: not found" in _one_line_error(capsys)


def test_malformed_line_is_exit_2_with_line_number(tmp_path, capsys):
    lines = [json.dumps({"kind": "step", "step": 1}), "", "{not json", ""]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    assert main(["report", str(tmp_path)]) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"shoal: error: {tmp_path / 'metrics.jsonl'} line 3: not valid JSON")
    assert not (tmp_path / "report.html").exists()


def test_directory_argument_is_required(capsys):
    with pytest.raises(SystemExit) as info:
        main(["report"])
    assert info.value.code == 2


def test_truncated_last_line_is_skipped(tmp_path, capsys):
    # a run killed mid-write: the report shows what was written in full
    directory = write_synthetic_run(tmp_path / "run", num_steps=8)
    with open(directory / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "step", "step": 9, "loss": 0.')
    assert main(["report", str(directory)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {directory / 'report.html'}"
    assert [s.step for s in load_run(directory).steps] == list(range(1, 9))


@pytest.mark.parametrize("blocked", ["report.html", "report"])
def test_an_output_path_taken_is_exit_2(tmp_path, capsys, blocked):
    """A directory named report.html, or a file named report (the plots' folder), was a
    traceback (IsADirectoryError, FileExistsError) and exit code 1."""
    directory = write_synthetic_run(tmp_path / "run", num_steps=8)
    taken = directory / blocked
    if blocked == "report.html":
        taken.mkdir()
    else:
        taken.write_text("kept")
    assert main(["report", str(directory)]) == 2
    assert f"cannot write the report: {taken}" in _one_line_error(capsys)
    assert not (directory / ".report.html.tmp").exists()
    assert taken.is_dir() or taken.read_text() == "kept"
