"""Tensor parallelism in 2 gloo processes, compared with the unscheduled model (see cases)."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # the case modules live beside this file
from sched_dist_harness import run_cases  # noqa: E402

pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def results():
    return run_cases("sched_tp_cases")


@pytest.mark.parametrize(
    "case",
    [
        "column_linear",
        "row_linear",
        "tp_mlp",
        "tp_attention",
        "vocab_embedding",
        "sequence_parallel",
        "verify_passes",
        "verify_catches_missing_sync",
        "bad_schedules_raise",
    ],
)
def test_case(results, case):
    for rank, outcome in enumerate(results[case]):
        assert outcome == "ok", f"rank {rank}:\n{outcome}"
