"""`shoal report DIR` through the CLI: exit codes and one-line errors."""

import json
import warnings

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


@pytest.mark.parametrize("key", ["loss", "samples_per_s"])
def test_a_value_near_the_float_limit_is_drawn_without_warnings(tmp_path, capsys, key):
    """matplotlib's tick arithmetic overflowed on it and warned twice on stderr. (A wall time
    there is no clock's: it is refused, see test_bad_metrics_values_are_one_line_...)"""
    directory = write_synthetic_run(tmp_path / "run", num_steps=8)
    metrics = directory / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    last_step = max(i for i, line in enumerate(lines) if line["kind"] == "step")
    lines[last_step][key] = 1e308
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["report", str(directory)]) == 0
    assert [str(w.message) for w in caught] == []
    assert (directory / "report" / "loss.png").stat().st_size > 0


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
    # what was in the way is left as it was (the `or` of both cases held for a file replaced by
    # a folder)
    if blocked == "report.html":
        assert taken.is_dir() and not any(taken.iterdir())
    else:
        assert taken.is_file() and taken.read_text() == "kept"


STEP = {"kind": "step", "step": 1, "wall_time_s": 0.5}
COST = {"kind": "cost", "t_s": 1.0, "usd": 0.1, "by_kind": {"k80": 0.1}, "mix": {"k80:spot": 1}}


@pytest.mark.parametrize(
    "line, message",
    [
        # a RecursionError traceback
        ("[" * 100_000 + "]" * 100_000, "not valid JSON (nested too deeply)"),
        # Python's own words, about sys.set_int_max_str_digits
        ('{"kind": "step", "step": ' + "9" * 5000 + "}", "not valid JSON (an integer of more"),
        # no float holds 10^400: an OverflowError traceback
        (json.dumps({**STEP, "loss": 10**400}), "'loss' is too large a number (401 digits)"),
        # 10^29 steps: an OverflowError traceback in the plots
        (json.dumps({**STEP, "step": 10**29}), "'step' must be an integer of at most 64 bits"),
        # "Axis limits cannot be NaN or Inf", naming no file
        (json.dumps({**STEP, "wall_time_s": float("inf")}), "'wall_time_s' must be a finite"),
        # near the float limit the time axes overflowed: a traceback (OverflowError in the
        # tick formatter), or matplotlib's "arange: cannot compute length" as the error
        (json.dumps({**STEP, "wall_time_s": 1e308}), "'wall_time_s' must be from -1e+12 to"),
        (json.dumps({**STEP, "wall_time_s": -1.7e308}), "'wall_time_s' must be from -1e+12 to"),
        (
            '{"kind": "membership", "event": "fail", "worker": "w1", "wall_time_s": 1e300}',
            "'wall_time_s' must be from -1e+12 to 1e+12 seconds, got 1e+300",
        ),
        (
            '{"kind": "membership", "event": "fail", "worker": "w1", "wall_time_s": NaN}',
            "'wall_time_s' must be a finite number, got nan",
        ),
        # an OverflowError traceback; NaN was "cannot convert float NaN to integer"; 1.5 was 1
        (json.dumps({**COST, "mix": {"k80:spot": float("inf")}}), "'mix' must be an object of"),
        (json.dumps({**COST, "mix": {"k80:spot": float("nan")}}), "'mix' must be an object of"),
        (json.dumps({**COST, "mix": {"k80:spot": 1.5}}), "'mix' must be an object of counts"),
        (json.dumps({**COST, "by_kind": {"k80": float("nan")}}), "'by_kind' must be an object of"),
    ],
)
def test_bad_metrics_values_are_one_line_naming_the_line(tmp_path, capsys, line, message):
    (tmp_path / "metrics.jsonl").write_text(json.dumps(STEP) + "\n" + line + "\n")
    assert main(["report", str(tmp_path)]) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"shoal: error: {tmp_path / 'metrics.jsonl'} line 2: {message}"), err


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, "not valid JSON (nested too deeply)"),
        ('{"wall_time_s": 1' + "0" * 400 + "}", "not valid JSON (an integer of 401 digits"),
    ],
)
def test_bad_result_json_is_one_line(tmp_path, capsys, text, message):
    # a RecursionError and an OverflowError traceback
    (tmp_path / "metrics.jsonl").write_text(json.dumps(STEP) + "\n")
    (tmp_path / "result.json").write_text(text)
    assert main(["report", str(tmp_path)]) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"shoal: error: {tmp_path / 'result.json'}: {message}"), err


@pytest.mark.parametrize("name", ["metrics.jsonl", "result.json"])
def test_an_unreadable_file_is_one_line(tmp_path, capsys, monkeypatch, name):
    # no permission, an I/O error: an OSError traceback
    (tmp_path / "metrics.jsonl").write_text(json.dumps(STEP) + "\n")
    (tmp_path / "result.json").write_text("{}")
    target = tmp_path / name
    real = {"read_bytes": type(target).read_bytes, "read_text": type(target).read_text}

    def refusing(method):
        def read(self, *args, **kwargs):
            if self == target:
                raise PermissionError(13, "Permission denied", str(self))
            return real[method](self, *args, **kwargs)

        return read

    for method in real:
        monkeypatch.setattr(type(target), method, refusing(method))
    assert main(["report", str(tmp_path)]) == 2
    assert _one_line_error(capsys) == f"shoal: error: {target}: cannot read (Permission denied)\n"
