"""`shoal torchrun`: torchrun's elastic agent running `python -m shoal.worker JOB.py ...`, with
shoal's error contract on top.

Every torchrun option is torchrun's own (its parser, its rendezvous, its restarts). What differs
is how a run that fails is told: plain torchrun ends any failure with its own traceback and a
report block (exit 1), even when every worker only refused a flag. Here each worker writes the
error it stopped on to the file torchrun gives it (`TORCHELASTIC_ERROR_FILE`) instead of stderr;
a refused input is then one line and exit code 2, a disk that refused a write the worker's line
with how to resume (exit code 1), and any other failure one line naming the first worker that
failed, exit code 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

from shoal.errors import RunFailed, UserError

# set by the front for its workers: report errors to the agent's file, not on stderr
QUIET_ENV = "SHOAL_TORCHRUN_FRONT"
# a worker's exit code for bad input (the CLI's)
BAD_INPUT = 2


def under_front() -> bool:
    """Whether this worker was started by `shoal torchrun`, which checked its flags with the
    job before starting it and tells its errors."""
    return os.environ.get(QUIET_ENV) == "1"


def report_to_agent(message: str) -> bool:
    """Write `message` where torchrun's agent reads a worker's failure (its error file, in the
    format its `ProcessFailure` parses). Returns whether the worker runs under the front, which
    prints the message once itself (each worker printing it would repeat it per rank)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return False
    try:
        with open(path, "w") as fh:
            json.dump({"message": message, "timestamp": int(time.time()), "shoal": True}, fh)
    except OSError:
        return False  # the agent's folder is gone: stderr is the only place left
    return under_front()


def parse(argv: list[str], description: str) -> tuple[argparse.Namespace, int, int]:
    """torchrun's own options and the job (`[TORCHRUN OPTIONS] JOB.py [JOB FLAGS]`), how many
    workers each node starts and the most nodes. Sizes torchrun would only assert on are refused
    in one line."""
    from torch.distributed.run import (
        determine_local_world_size,
        get_args_parser,
        parse_min_max_nnodes,
    )

    parser = get_args_parser()
    parser.prog, parser.description = "shoal torchrun", description

    def refuse(message: str) -> None:  # argparse's usage block and message: one line instead
        raise UserError(message)

    parser.error = refuse  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    if args.module or args.no_python:
        raise UserError("shoal torchrun runs a job file (JOB.py), not -m or --no-python")
    try:
        low, high = parse_min_max_nnodes(args.nnodes)
    except (ValueError, RuntimeError):
        low, high = 0, 0
    if not 0 < low <= high:
        raise UserError(f"--nnodes {args.nnodes}: expected N or MIN:MAX with 0 < MIN <= MAX")
    local = determine_local_world_size(args.nproc_per_node)  # its ValueError names the value
    if local < 1:
        raise UserError(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
    return args, local, high


def agent_run_id(args: argparse.Namespace, max_nodes: int) -> str | None:
    """The job id torchrun's agent will give the workers (their TORCHELASTIC_RUN_ID): its
    --rdzv-id, or None where torchrun makes up a fresh one (torch 2.13's `run`: --standalone,
    and a static rendezvous on one node with neither --rdzv-endpoint nor --master-port), which
    no earlier checkpoint can hold."""
    if args.standalone:
        return None
    static = args.rdzv_backend == "static" and not args.rdzv_endpoint
    if static and args.master_port is None and max_nodes == 1:
        return None
    return args.rdzv_id


def job_argv(args: argparse.Namespace) -> list[str]:
    """What each worker is given: the job file and its flags."""
    return [args.training_script, *args.training_script_args]


def launch(args: argparse.Namespace) -> int:
    """Run the job under torchrun's agent; return 0 when every worker finished, 128 + the
    signal's number when the agent was told to stop."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import run

    argv = job_argv(args)
    args.module, args.training_script, args.training_script_args = True, "shoal.worker", argv
    os.environ[QUIET_ENV] = "1"  # the workers inherit the agent's environment
    pinned = "PYTHONHASHSEED" not in os.environ  # one string hash for all (supervisor.py)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    # its "failed (exitcode: 2) local_rank: 0 ..." line: the failure is told below, once
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    try:
        run(args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.error_file_data.get("shoal"):  # the worker's own words, once
            if failure.exitcode == BAD_INPUT:
                raise UserError(failure.message) from None
            raise RunFailed(failure.message) from None  # a disk that refused a write
        why = f"exit code {failure.exitcode}" if failure.exitcode >= 0 else failure.message
        said = f"worker rank {rank} stopped with {why} (its output above says why)"
        raise RunFailed(said) from None
    except SignalException as exc:  # SIGTERM or SIGINT to the agent: it stopped the workers
        name = signal.Signals(exc.sigval).name
        sys.stderr.write(f"shoal: stopped by {name}; the agent stopped the workers\n")
        return 128 + exc.sigval
    finally:
        os.environ.pop(QUIET_ENV, None)
        if pinned:  # (as launcher/supervisor.py pins it for shoal run's workers)
            os.environ.pop("PYTHONHASHSEED", None)
    return 0
