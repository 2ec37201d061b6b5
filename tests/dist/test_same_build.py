"""Every worker must build the same model: the step's message lays the gradients out in
parameter order. A model named by a set (ordered by each process's string hash seed) is built
alike by shoal run's workers, which share one; a build that still differs is refused in one
line, not trained into a digest that depends on the workers."""

import pathlib

import pytest

from shoal_testing import shoal_run

pytestmark = pytest.mark.dist
JOB = str(pathlib.Path(__file__).with_name("build_job.py"))


def test_a_model_built_by_iterating_over_a_set_trains(tmp_path):
    """Each sync compares the members' parameter layouts (the other test shows the check
    refuses): two workers that ordered the set's six names each by a hash seed of its own
    (1 chance in 720 of agreeing) were refused, so a run that ends well built one model."""
    result = shoal_run(tmp_path / "two", "k80,k80", 6, job=JOB)
    assert result["final_step"] == 6


def test_workers_that_build_other_initial_weights_are_refused(tmp_path):
    err = shoal_run(tmp_path / "run", "k80,k80", 6, "-o", "init=pid", job=JOB, expect=2)
    lines = err.strip().splitlines()
    assert "different initial values" in lines[-1] and "Traceback" not in err, err
