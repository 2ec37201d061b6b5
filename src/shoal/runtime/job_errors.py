"""An exception in a worker that is not a peer's failure: the job's code raising, wrong shapes, a
loss that is not a scalar, bad input. It is deterministic: every worker would meet it again,
after any regroup or resume. `reports_errors` wraps the worker's entry so that the worker
reports it in one line (file and line) in `<id>.cause.json` for the controller, with the
traceback, and exits with code 2. A write the disk refused (`StorageError`) is not the job's
fault: reported as such, and under torchrun it stays a failed run to resume (exit code 1).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import sys
import traceback

from shoal.config import RunConfig
from shoal.errors import CAUSE_SUFFIX, StorageError, UserError, user_code_error
from shoal.runtime.membership import PeerFailure


def reports_errors(main):
    """Turn an exception that is not a peer's failure into a reported cause and a UserError
    (which the worker's entry prints as one line, exit code 2)."""

    @functools.wraps(main)
    def wrapper(config: RunConfig) -> int:
        try:
            return main(config)
        except PeerFailure:
            raise
        except StorageError as exc:  # a full or read-only disk: the run stops, resumable
            _write_cause(config, str(exc), traceback.format_exc(), storage=True)
            if not os.environ.get("SHOAL_WORKER_ID"):  # torchrun: its entry adds the resume
                raise
            # shoal run: one line from the worker, which the launcher reads from the cause
            # file and tells with the resume command
            raise UserError(str(exc)) from exc
        except Exception as exc:
            error = exc if isinstance(exc, UserError) else user_code_error(exc)
            text = traceback.format_exc()
            path = _write_cause(config, str(error), text)
            # under shoal run, stderr is the worker's log; under torchrun the console, where
            # the traceback goes only if the cause file could not keep it, and not for bad
            # input (--out a file: every rank printed a traceback before its one line)
            if os.environ.get("SHOAL_WORKER_ID") or (
                path is None and not isinstance(exc, UserError)
            ):
                sys.stderr.write(text)
            elif not isinstance(exc, UserError):  # torchrun: stderr is the console, one line
                raise UserError(f"{error} (traceback in {path})") from exc
            raise error from exc

    return wrapper


def _write_cause(
    config: RunConfig, cause: str, text: str, storage: bool = False
) -> pathlib.Path | None:
    """`<id>.cause.json` where the controller looks for it (SHOAL_CAUSE_DIR), else OUT/logs;
    its path, or None if it could not be written. `storage`: the cause is a file the disk
    refused (`StorageError`), a failed run to resume, not bad input."""
    wid = os.environ.get("SHOAL_WORKER_ID") or f"w{os.environ.get('RANK', 0)}"
    folder = pathlib.Path(os.environ.get("SHOAL_CAUSE_DIR") or pathlib.Path(config.out) / "logs")
    tmp = folder / f".{wid}{CAUSE_SUFFIX}.tmp"
    report = {"worker": wid, "cause": cause, "traceback": text}
    if storage:
        report["storage"] = True
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(report))
        os.replace(tmp, folder / f"{wid}{CAUSE_SUFFIX}")
    except OSError:
        with contextlib.suppress(OSError):  # a full disk: not left behind half-written
            tmp.unlink(missing_ok=True)
        return None  # the one-line error on stderr still tells it
    return folder / f"{wid}{CAUSE_SUFFIX}"
