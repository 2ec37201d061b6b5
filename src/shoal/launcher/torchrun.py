"""The torchrun entry: one worker process, as `python -m shoal.worker JOB.py --steps N --out DIR`
(or a job file calling `shoal.launch`) runs it under torchrun or `shoal run`.

Under `shoal run` the configuration arrives whole in SHOAL_CONFIG (`RunConfig.to_env`) and argv
is empty; under torchrun it is parsed from argv, with the emulation knobs from the environment.
"""

from __future__ import annotations

import argparse
import os
import sys

from shoal.config import EmulationConfig, RunConfig


def parse_config(argv: list[str] | None = None) -> RunConfig:
    """The worker's configuration: SHOAL_CONFIG when a launcher set it, else the flags."""
    from shoal.cli.flags import add_flags, from_args

    given = RunConfig.from_env()
    if given is not None and not argv:
        return given
    parser = argparse.ArgumentParser(prog="python -m shoal.worker")
    add_flags(parser, RunConfig)
    return from_args(RunConfig, parser.parse_args(argv), emulation=EmulationConfig.from_environ())


def cli(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        config = parse_config(argv)
        from shoal.runtime.loop import main

        return main(config)
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
