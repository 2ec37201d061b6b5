"""A job a trace names by steps or by seconds runs that many steps or seconds.

An EasyScale row is `epochs` over 1 % of its dataset at batch `batch_size x max_parallelism`; a
Philly row is its duration on its GPUs of the reference kind. Both become progress along the
application's measured curve, where early steps gain less than later ones: these tests time
the work back through the simulator's own integral (`segment_rate`) and through a whole
simulation, so a conversion at the curve's mean gain (yolov3: ~7x the start's) fails them.
"""

import math

import pytest

from shoal.perf.goodput import goodput_model
from shoal.perf.profiles import APPS, PROFILE_KIND
from shoal.sim.run import simulate
from shoal.sim.workloads import EASYSCALE_EPOCH_SAMPLES, load_workload, sample_philly

HEADER = "name,time,application,max_parallelism,batch_size,epochs,enable_heterogeneous_deterministic,preferred_gpu\n"  # noqa: E501


def _steps(app: str, counts, nodes: int, batch: int, progress: float) -> float:
    """Steps the simulator takes from progress 0 to `progress` on a fixed placement."""
    model = goodput_model(app)
    seconds = progress / model.segment_rate(counts, nodes, batch, 0.0, progress)
    return seconds / model.step_time_s(counts, nodes, batch)


@pytest.mark.parametrize("app", APPS)
@pytest.mark.parametrize("scale", [1, 8])
@pytest.mark.parametrize("steps", [10, 400, 20_000, 2_000_000])
def test_progress_after_is_the_inverse_of_the_step_count(app, scale, steps):
    model = goodput_model(app)
    batch = min(model.profile.max_batch_size, model.profile.init_batch_size * scale)
    progress = model.progress_after(batch, steps)
    counts = ((PROFILE_KIND, 1),)
    # bert's curves at different batches are measured at different points: the midpoint
    # rule's pieces then differ a little from the inverse's
    assert _steps(app, counts, 1, batch, progress) == pytest.approx(steps, rel=3e-3)


def test_an_easyscale_job_trains_its_epochs(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "yolo,0,yolov3,16,4,200,0,v100\n")
    (job,) = load_workload(str(path))
    steps = 200 * EASYSCALE_EPOCH_SAMPLES["yolov3"] / 64
    assert _steps("yolov3", (("v100", 16),), 4, 64, job.total_progress) == pytest.approx(
        steps, rel=1e-6
    )


def test_an_easyscale_gang_job_alone_runs_for_its_steps(tmp_path):
    # YARN-CS runs the job as one gang of its 16 V100s for its whole life: its JCT is the
    # start-up stall and its steps at that placement's step time, nothing else
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "yolo,0,yolov3,16,4,200,0,v100\n")
    summary = simulate("yarn-cs", str(path), "easyscale")
    step_s = goodput_model("yolov3").step_time_s((("v100", 16),), 4, 64)
    steps = 200 * EASYSCALE_EPOCH_SAMPLES["yolov3"] / 64
    assert summary["avg_jct_s"] == pytest.approx(30.0 + steps * step_s, rel=2e-3)


def test_a_philly_job_runs_for_its_duration_on_its_gpus(tmp_path):
    rows = [(d, g) for d in (90.0, 3_000.0, 40_000.0, 400_000.0) for g in (2, 4, 8, 16)]
    path = tmp_path / "philly.csv"
    path.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        + "".join(f"2017-10-03 00:{i:02d}:00,{d},{g},{d * g},x\n" for i, (d, g) in enumerate(rows))
    )
    jobs = sample_philly(None, seed=1, path=path)
    assert len({j.app for j in jobs}) > 2
    for job, (duration, gpus) in zip(jobs, rows, strict=True):
        counts = ((PROFILE_KIND, gpus),)
        model = goodput_model(job.app)
        rate = model.segment_rate(
            counts, math.ceil(gpus / 4), job.batch_size, 0.0, job.total_progress
        )
        assert job.total_progress / rate == pytest.approx(duration, rel=3e-3), job
