"""The user-facing error types, and how an exception raised in user code is told in one line.

A `UserError` means the input (a config, a flag, a trace, a checkpoint, the job file) is wrong,
not the code. The CLI prints its message on one line and exits with code 2; library callers
catch it as a `ValueError`. An exception raised by the job's own code (a syntax error, a failed
import, a `make_job` or loss function that raises) is deterministic: it will recur on any worker
and after any resume, so it is reported as a `UserError` naming the user's file and line
(`cause_line`), never as a failure to resume from.
"""

from __future__ import annotations

import pathlib
import sysconfig
import traceback


class UserError(ValueError):
    """Bad input from the user; the message names the problem in one line."""


class RunFailed(RuntimeError):
    """A run could not finish (for example every worker was lost); the message says what to do."""


class StorageError(RunFailed):
    """A file of the run could not be written (a full or read-only disk): not the user's input
    and not the job's code. The run stops on it; the files written before are left whole, so a
    --resume continues once the disk can take the writes."""


# how every StorageError's message begins (a worker whose disk had no room for its cause file
# leaves the line in its log, and the launcher tells it from bad input by this)
STORAGE_PREFIX = "cannot write "


def cannot_write(what: str, path: object, exc: OSError) -> StorageError:
    """`cannot write <what> '<path>': <reason>` (e.g. No space left on device)."""
    what = f"{what} " if what else ""
    return StorageError(f"{STORAGE_PREFIX}{what}{str(path)!r}: {exc.strerror or exc}")


# a worker's report of the error it stopped on, `<worker id>.cause.json` in the attempt's log
# folder: the controller reads the cause from it, not from the worker's log
CAUSE_SUFFIX = ".cause.json"

_SHOAL = pathlib.Path(__file__).resolve().parent
# the interpreter's and the installed packages' code: not where a user's mistake is
_LIBRARIES = {
    pathlib.Path(p).resolve()
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
    if (p := sysconfig.get_paths().get(key))
}


def _is_library(filename: str) -> bool:
    path = pathlib.Path(filename).resolve()
    return filename.startswith("<") or any(path.is_relative_to(lib) for lib in _LIBRARIES)


def _where(exc: BaseException) -> str | None:
    """`file:line` of the frame most likely at fault: the deepest in the user's own code, else
    the deepest in shoal (the call into a library that refused the user's values)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if pathlib.Path(f.filename).resolve().is_relative_to(_SHOAL)]
    mine = [f for f in frames if f not in own and not _is_library(f.filename)]
    best = (mine or own or frames or [None])[-1]
    return f"{best.filename}:{best.lineno}" if best is not None else None


def cause_line(exc: BaseException) -> str:
    """One line for an exception from user code: `<file>:<line>: <Type>: <message>`."""
    if isinstance(exc, UserError):
        return str(exc)
    text = str(exc.msg if isinstance(exc, SyntaxError) else exc).strip().splitlines()
    what = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    where = _where(exc)
    return f"{where}: {what}" if where else what


def unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Why a user's text file could not be read, in words (not `IsADirectoryError`)."""
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return f"cannot read ({exc.strerror or exc})"


def user_code_error(exc: BaseException) -> UserError:
    """A UserError telling `exc` in one line (the traceback stays on `__cause__`)."""
    err = UserError(cause_line(exc))
    err.__cause__ = exc
    return err
