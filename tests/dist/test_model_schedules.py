"""GPT-2, GPT-Neo, BERT, OPT and LLaMA (transformers, built from configs) under the library's
tensor-parallel + checkpointing schedules on 2 gloo ranks, equal to the unscheduled models.

All five run in ONE 2-rank process group (`tests/dist/schedule/sched_hf_cases.py`): start-up
dominates on a small CPU box. Skipped when transformers (the `hf` extra) is not installed.
"""

import pathlib
import sys

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(pathlib.Path(__file__).parent / "schedule"))
from sched_dist_harness import run_cases  # noqa: E402

pytestmark = pytest.mark.dist

MODELS = ["gpt2", "gpt_neo", "bert", "opt", "llama"]


@pytest.fixture(scope="module")
def results():
    return run_cases(["sched_hf_cases"])


@pytest.mark.parametrize("model", MODELS)
def test_hf_model_schedule_matches_unscheduled(results, model):
    for rank, outcome in enumerate(results[f"hf_{model}"]):
        assert outcome == "ok", f"rank {rank}:\n{outcome}"
