"""`python -m shoal.worker JOB.py --steps N --out DIR`: one worker; what torchrun launches."""

from __future__ import annotations

import argparse
import sys


def cli(argv: list[str] | None = None) -> int:
    from shoal.runtime.worker import add_run_arguments, main

    parser = argparse.ArgumentParser(prog="python -m shoal.worker")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return main(args)
    except ValueError as exc:
        sys.stderr.write(f"shoal: error: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(cli())
