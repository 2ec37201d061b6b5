"""Schedules in 2 gloo processes, compared numerically with the unscheduled model.

One spawn runs every case (process start-up dominates on a small CPU box): tensor parallelism
(`sched_tp_cases`, `sched_row_parallel_cases`), its DTensor backend (`sched_dtensor_cases`), a
whole Slapo-style program (`sched_program_cases`) and a 2-stage pipeline
(`sched_pipeline_cases`).
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # the case modules live beside this file
from sched_dist_harness import run_cases  # noqa: E402

pytestmark = pytest.mark.dist

CASES = [
    "column_linear",
    "row_linear",
    "tp_mlp",
    "tp_attention",
    "tp_attention_fused_qkv",
    "vocab_embedding",
    "sequence_parallel",
    "verify_passes",
    "verify_catches_missing_sync",
    "bad_schedules_raise",
    "parallel_cross_entropy",
    "meta_init_build",
    "reshard_strings",
    "collective_fallbacks",
    "dtensor_backend_mlp",
    "dtensor_backend_verify",
    "dtensor_backend_embedding_sp",
    "decoder_program",
    "pipeline_gpipe",
    "pipeline_1f1b",
    "pipeline_two_values",
    "pipeline_tied_weights",
    "row_conv_bias",
    "shared_row_linear",
]


@pytest.fixture(scope="module")
def results():
    return run_cases(
        [
            "sched_tp_cases",
            "sched_row_parallel_cases",
            "sched_dtensor_cases",
            "sched_program_cases",
            "sched_pipeline_cases",
        ]
    )


def test_every_case_is_listed(results):
    assert sorted(results) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_case(results, case):
    for rank, outcome in enumerate(results[case]):
        assert outcome == "ok", f"rank {rank}:\n{outcome}"
