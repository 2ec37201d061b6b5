"""The torchrun entry: one worker process, as `python -m shoal.worker JOB.py --steps N --out DIR`
(or a job file calling `shoal.launch`) runs it under torchrun or `shoal run`."""

from __future__ import annotations

import argparse
import os
import sys


def cli(argv: list[str] | None = None) -> int:
    from shoal.runtime.loop import add_run_arguments, main

    parser = argparse.ArgumentParser(prog="python -m shoal.worker")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return main(args)
    except ValueError as exc:
        sys.stderr.write(f"shoal: error: {exc}\n")
        return 2


def run_as_script() -> None:
    code = cli()
    # Every output is written and closed by now. Interpreter shutdown can block for many
    # seconds in torch.distributed teardown, which would delay the controller's next decision.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
