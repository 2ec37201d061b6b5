"""A job file's own code draws the same data on every worker."""

import random

import torch

from shoal.job import build_job, load_job_file

JOB = """
import random
import torch
import shoal

AT_IMPORT = torch.randn(4)

def make_job(n=8):
    x, y = torch.randn(n, 3), torch.tensor([random.randrange(2) for _ in range(n)])
    return shoal.Job(
        model=lambda: torch.nn.Linear(3, 2),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
        dataset=torch.utils.data.TensorDataset(x, y),
        loss_fn=lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]),
        micro_batch_size=2,
        global_batch_size=4,
    )
"""


def test_data_drawn_without_a_generator_is_the_same_in_every_process(tmp_path):
    """torch starts each process from a random seed: unseeded torch.randn in a job file gave
    each worker its own dataset (the digest then matched no layout)."""
    path = tmp_path / "unseeded.py"
    path.write_text(JOB)
    built = []
    for state in (1, 2):  # two workers' generators before the job file runs
        torch.manual_seed(state)
        random.seed(state)
        make_job = load_job_file(path)
        at_import = make_job.__globals__["AT_IMPORT"]
        torch.rand(state)  # whatever else ran in between
        built.append((at_import, build_job(make_job, {}, None).dataset.tensors))
    (a0, (x0, y0)), (a1, (x1, y1)) = built
    assert torch.equal(a0, a1) and torch.equal(x0, x1) and torch.equal(y0, y1)


def test_a_job_file_imports_the_modules_beside_it(tmp_path):
    """As `python job.py` can: its directory goes on sys.path (it did not, whatever the
    working directory)."""
    (tmp_path / "beside_the_job.py").write_text("N = 8\n")
    path = tmp_path / "sibling.py"
    path.write_text(JOB.replace("import shoal", "import shoal\nfrom beside_the_job import N"))
    job = build_job(load_job_file(path), {}, None)
    assert len(job.dataset) == 8 and load_job_file(path).__globals__["N"] == 8
