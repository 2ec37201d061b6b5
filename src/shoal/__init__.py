"""shoal: exact, elastic, heterogeneity-aware data-parallel training.

The public API is small: `Job` (what to train) and `launch(make_job)` (run a job file's
workers under torchrun). Importing shoal does no work and does not import torch.
"""

from shoal.job import Job

__all__ = ["Job", "launch"]


def launch(make_job, argv: list[str] | None = None) -> int:
    """Run this process as one shoal worker for `make_job` (for job files run by torchrun).

    Use as ``if __name__ == "__main__": raise SystemExit(shoal.launch(make_job))`` and start the
    file with ``torchrun --nproc-per-node K JOB.py --steps N --out DIR``.
    """
    import sys

    import __main__
    from shoal.launcher.torchrun import cli

    argv = list(sys.argv[1:] if argv is None else argv)
    job_path = getattr(__main__, "__file__", None)
    if job_path is None or getattr(__main__, "make_job", None) is not make_job:
        raise ValueError("shoal.launch(make_job) must be called from the job file being run")
    return cli([job_path, *argv])
