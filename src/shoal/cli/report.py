"""`shoal report DIR`: render a run directory's metrics as `DIR/report.html` plus PNG plots.

Parsing and dispatch only; the work is in `shoal.report`, imported when the command runs so
that `shoal --help` does not load matplotlib.
"""

from __future__ import annotations

import argparse

from shoal.cli.flags import nonempty


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `report` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="write DIR/report.html with plots of a run",
        description=(
            "Read the run directory written by `shoal run` (metrics.jsonl, result.json) and "
            "write DIR/report.html with its PNG plots in DIR/report/: loss, samples/s, "
            "micro-batch share per worker, the membership timeline with recoveries, (adaptive "
            "batch) global batch, noise scale, similarity and LR factor beside the loss, "
            "(--provider) the spend by kind, and (--compress) the link's keep ratio."
        ),
    )
    parser.add_argument(
        "directory", type=nonempty, metavar="DIR", help="run directory written by `shoal run`"
    )
    parser.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Write the report; return the exit code."""
    from shoal.report import write_report

    path = write_report(args.directory)
    print(f"wrote {path}")
    return 0
