"""`python -m shoal.worker JOB.py --steps N --out DIR`: the worker entry torchrun launches.

The public name of `shoal.launcher.torchrun`; kept here so the command stays short.
"""

if __name__ == "__main__":
    from shoal.launcher.torchrun import run_as_script

    run_as_script()
