"""Command-line entry point: argument parsing and dispatch only.

Each subcommand lives in its own module under `shoal.cli` and exposes
`register(subparsers) -> None`, which adds its parser and sets `func(args) -> int`.
User errors (`ValueError`, which includes `shoal.errors.UserError`) become one line on stderr
and exit code 2, never a traceback (unless `--verbose` asks for the one of an error raised in
the job's own code).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import signal
import sys
import traceback

from shoal.cli.flags import HelpFormatter
from shoal.console import console_outlives_its_reader
from shoal.errors import RunFailed

# a full disk, an exhausted quota, a read-only file system
_DISK_REFUSED = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}

# Subcommand modules, in the order `shoal --help` lists them.
COMMANDS = ["run", "torchrun", "demo", "report", "simulate", "tune"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and exit code 2, and whose help shows
    each option's default."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"shoal: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shoal", description="Exact elastic training on whatever GPUs you have.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"shoal.cli.{name}")
        except ModuleNotFoundError as exc:  # a command not built yet
            if exc.name != f"shoal.cli.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command of `argv` (None: this process's command line); its exit code."""
    with console_outlives_its_reader():  # `| head`, a hung-up terminal: see ConsoleStream
        code = _command(argv)
        if argv is None:  # the process is the command, and its outcome is told (flushed next)
            _exit_as_told()
    return code


def outcome_known(args: argparse.Namespace) -> None:
    """Called by a command once its outcome is settled (a run finished, its result written),
    before it tells it: from here a Ctrl-C, SIGTERM or SIGHUP cannot change it (as in
    `_exit_as_told`, which comes later: one landing between the "done" line and it turned the
    finished run into "shoal: interrupted", exit 130). Only where the process is the command:
    an in-process caller keeps its handlers."""
    if getattr(args, "owns_process", False):
        _exit_as_told()


def _exit_as_told() -> None:
    """Signals are ignored while the interpreter shuts down: Python resets its handlers to the
    default first, and torch's teardown takes most of a second after that, so a Ctrl-C just
    after a run had finished (its "done" line printed) killed the process with SIGINT and the
    finished run exited as interrupted (130)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def _command(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    args.owns_process = argv is None
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:
        if getattr(args, "verbose", False) and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__)  # an error in the job's code: where
        sys.stderr.write(f"shoal: error: {exc}\n")
        return 2
    except RunFailed as exc:
        sys.stderr.write(f"shoal: run failed: {exc}\n")
        return 1
    except OSError as exc:
        if exc.errno in _DISK_REFUSED:  # a write no layer named: still one line, a failed run
            where = f"{_shown(exc.filename)}: " if exc.filename else ""
            sys.stderr.write(f"shoal: run failed: cannot write {where}{exc.strerror}\n")
            return 1
        # a path flag or argument past the file system's limit on a name (255 bytes on most):
        # pathlib's exists(), is_file() and is_dir() raise it (Python 3.11), and every command
        # checks its paths that way, so `--workload`, `report DIR`, `--checkpoint-dir`,
        # `--resume`, tune's `--out` each ended in a traceback
        if exc.errno != errno.ENAMETOOLONG:
            raise
        sys.stderr.write(f"shoal: error: file name too long: {_shown(exc.filename)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("shoal: interrupted\n")
        return 130


def _shown(name: object) -> str:
    """A path in an error, cut to a readable length (one line, not a screenful)."""
    text = repr(str(name)) if name is not None else "(unnamed)"
    return text if len(text) <= 100 else f"{text[:97]}..."


if __name__ == "__main__":
    raise SystemExit(main())
