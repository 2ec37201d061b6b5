"""The metrics schema: records survive a write and a read, old lines load, bad ones are named."""

import json

import pytest

from shoal.errors import UserError
from shoal.metrics.files import (
    RunResult,
    parse_line,
    parse_metrics_bytes,
    read_metrics,
    read_result,
)
from shoal.metrics.training import MembershipEvent, StepLine, WorkerShare

STEP = StepLine(
    step=3,
    loss=0.75,
    global_batch_size=64,
    micro_batch_size=8,
    step_time_s=0.2,
    samples_per_s=320.0,
    wall_time_s=1.5,
    redone=0,
    generation=1,
    workers=(
        WorkerShare("w0", 0, "v100", 6, 0.02),
        WorkerShare("w1", 1, "k80", 2, 0.07),
        WorkerShare("w2", 2, "k80", 0, None),
    ),
)
RECOVER = MembershipEvent("recover", "w0", "v100", 3, 1.9, 0.4, 1, "generation 1: 3 workers")
RESULT = RunResult(
    12,
    "ab" * 32,
    4.5,
    170.0,
    "exact",
    ("v100", "k80"),
    "ckpt/step-12",
    "f" * 64,
    nonfinite_skipped=2,
)


@pytest.mark.parametrize("record", [STEP, RECOVER, MembershipEvent("join", "w3")])
def test_line_round_trip(record):
    line = json.dumps(record.to_json())
    assert parse_line(line, "x") == record


def test_result_round_trip(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(RESULT.to_json()))
    assert read_result(path) == RESULT
    assert read_result(tmp_path / "absent.json") is None


def test_on_disk_field_names_are_todays():
    assert set(STEP.to_json()) == {
        "kind", "step", "loss", "global_batch_size", "micro_batch_size", "step_time_s",
        "samples_per_s", "wall_time_s", "redone", "generation", "workers",
    }  # fmt: skip
    assert STEP.to_json()["workers"][2] == {
        "id": "w2", "rank": 2, "device": "k80", "micro_batches": 0, "micro_batch_time_s": None,
    }  # fmt: skip
    assert RECOVER.to_json()["kind"] == "membership"
    assert "recovery_time_s" not in MembershipEvent("join", "w3").to_json()


def test_old_lines_without_optional_fields_load():
    # a line from before `redone` and `generation` were logged
    old = {"kind": "step", "step": 1, "loss": 2.0, "workers": [{"id": "w0", "micro_batches": 8}]}
    step = parse_line(json.dumps(old), "x")
    assert step == StepLine(1, 2.0, workers=(WorkerShare("w0", micro_batches=8),))
    assert RunResult.from_json({"final_step": 4}) == RunResult(final_step=4)


def test_reading_skips_blank_unknown_and_a_truncated_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    step, recover = json.dumps(STEP.to_json()), json.dumps(RECOVER.to_json())
    lines = [step, "", '{"kind": "checkpoint"}', recover]
    path.write_text("\n".join(lines) + '\n{"kind": "step", "st')
    assert list(read_metrics(path)) == [STEP, RECOVER]


def test_malformed_line_names_file_and_line():
    data = b'{"kind": "step", "step": 1}\n{"kind": "step"}\n'
    with pytest.raises(UserError, match=r"^m\.jsonl line 2: missing required key 'step'$"):
        list(parse_metrics_bytes(data, "m.jsonl"))
    with pytest.raises(UserError, match="line 1: not valid JSON"):
        list(parse_metrics_bytes(b"{oops\n", "m.jsonl"))  # terminated: not a crash mid-write
