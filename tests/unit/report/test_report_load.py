"""Parsing and validating run directories (shoal.report.load)."""

import pytest

from shoal.errors import UserError
from shoal.report.load import load_run
from unit.report.synthetic_run import INITIAL

STEP = {"kind": "step", "step": 1, "loss": 1.0}


def test_synthetic_run_parses_completely(synthetic_dir):
    run = load_run(synthetic_dir)
    assert [s.step for s in run.steps] == list(range(1, 41))
    assert [e.event for e in run.events] == ["fail", "recover", "join", "recover"] + [
        "leave",
        "recover",
        "join",
        "recover",
    ]
    first = run.steps[0]
    assert [(w.id, w.rank, w.device) for w in first.workers] == [
        (w, rank, kind) for rank, (w, kind) in enumerate(INITIAL.items())
    ]
    assert sum(w.micro_batches for w in first.workers) * first.micro_batch_size == 64
    assert run.events[1].lost_steps == 1 and run.events[1].recovery_time_s > 0
    assert run.result is not None and run.result.final_step == 40
    assert len(run.result.state_sha256) == 64


def test_optional_keys_may_be_missing(write_metrics):
    directory = write_metrics(
        [
            {"kind": "step", "step": 3},
            {"kind": "membership", "event": "join", "worker": "w9"},
        ]
    )
    run = load_run(directory)
    assert run.steps[0].loss is None and run.steps[0].workers == ()
    assert run.events[0].wall_time_s is None and run.events[0].device is None
    assert run.result is None


def test_blank_lines_unknown_kinds_and_nan_loss(write_metrics):
    directory = write_metrics(
        ["", {"kind": "checkpoint", "path": "x"}, '{"kind": "step", "step": 2, "loss": NaN}', ""]
    )
    run = load_run(directory)
    assert [s.step for s in run.steps] == [2]
    assert run.steps[0].loss is None  # a NaN loss is a gap in the curve, not a crash


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"step": 1}', "missing required key 'kind'"),
        ('{"kind": "step"}', "missing required key 'step'"),
        ('{"kind": "step", "step": "7"}', "'step' must be an integer, got '7'"),
        ('{"kind": "step", "step": 1.5}', "'step' must be an integer"),
        ('{"kind": "step", "step": 1, "loss": true}', "'loss' must be a number"),
        ('{"kind": "step", "step": 1, "workers": 3}', "'workers' must be a list"),
        ('{"kind": "step", "step": 1, "workers": [{"rank": 0}]}', "workers[0]: missing"),
        (
            '{"kind": "step", "step": 1, "workers": [{"id": "w0", "micro_batches": -1}]}',
            "'micro_batches' must be >= 0",
        ),
        ('{"kind": "membership", "event": "explode", "worker": "w1"}', "'event' must be one of"),
        ('{"kind": "membership", "event": "join"}', "missing required key 'worker'"),
        ('{"kind": "membership", "event": "recover", "worker": "w1", "lost_steps": "1"}', "'lost_"),
    ],
)
def test_malformed_line_names_file_and_line(write_metrics, line, message):
    directory = write_metrics([STEP, line])
    with pytest.raises(UserError) as info:
        load_run(directory)
    text = str(info.value)
    assert text.startswith(f"{directory / 'metrics.jsonl'} line 2: ")
    assert message in text
    assert "\n" not in text


def test_missing_directory(tmp_path):
    with pytest.raises(UserError, match="no such run directory"):
        load_run(tmp_path / "nowhere")


def test_missing_metrics_file(tmp_path):
    with pytest.raises(UserError, match=r"metrics\.jsonl: not found"):
        load_run(tmp_path)


def test_bad_result_json(write_metrics):
    directory = write_metrics([STEP])
    (directory / "result.json").write_text("{oops")
    with pytest.raises(UserError, match=r"result\.json: not valid JSON"):
        load_run(directory)
    (directory / "result.json").write_text('{"final_step": "ten"}')
    with pytest.raises(UserError, match="'final_step' must be an integer"):
        load_run(directory)


def test_resumed_run_keeps_wall_time_monotonic(write_metrics):
    # `shoal run --resume` appends from a new process whose clock starts again at 0
    directory = write_metrics(
        [
            {"kind": "step", "step": 0, "wall_time_s": 1.0},
            {"kind": "step", "step": 1, "wall_time_s": 2.0, "redone": 0},
            {"kind": "step", "step": 2, "wall_time_s": 0.5},
            {"kind": "membership", "event": "join", "worker": "w1", "wall_time_s": 0.7},
            {"kind": "step", "step": 3, "wall_time_s": 1.5},
        ]
    )
    run = load_run(directory)
    assert [s.wall_time_s for s in run.steps] == [1.0, 2.0, 2.5, 3.5]
    assert run.events[0].wall_time_s == 2.7


def test_truncated_last_line_is_skipped(write_metrics):
    # a run killed mid-write leaves its last line without the newline
    directory = write_metrics([STEP])
    with open(directory / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "step", "step": 2, "lo')
    run = load_run(directory)
    assert [s.step for s in run.steps] == [1]


def test_complete_last_line_without_newline_is_kept(write_metrics):
    directory = write_metrics([STEP])
    with open(directory / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "step", "step": 2}')
    assert [s.step for s in load_run(directory).steps] == [1, 2]
