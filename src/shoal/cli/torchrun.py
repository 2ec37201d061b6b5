"""`shoal torchrun [TORCHRUN OPTIONS] JOB.py [JOB FLAGS]`: torchrun running shoal workers, with
shoal's error contract (a refused input is one line and exit code 2, not torchrun's report).

Parsing and dispatch only; the agent is started in `shoal.runtime.torchrun_front`.
"""

from __future__ import annotations

import argparse
import signal
import sys

DESCRIPTION = (
    "Exactly `torchrun [OPTIONS] -m shoal.worker JOB.py [FLAGS]`: every option below is "
    "torchrun's. The job's flags and file are checked before any worker starts; a worker that "
    "refuses its input ends the run with its one-line error and exit code 2, any other failure "
    "with one line naming the first worker that failed (exit 1)."
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "torchrun",
        help="run a job under torchrun's elastic agent (its options, shoal's one-line errors)",
        add_help=False,  # --help is torchrun's parser's, with DESCRIPTION
        prefix_chars="+",  # every argument, options included, goes to torchrun's parser
    )
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=_torchrun)


def _torchrun(args: argparse.Namespace) -> int:
    from shoal.launcher.spec import check_job, check_local_processes
    from shoal.launcher.torchrun import check_before_agent, parse_config
    from shoal.runtime.torchrun_front import agent_run_id, job_argv, launch, parse

    torchrun_args, local, max_nodes = parse(args.argv, DESCRIPTION)
    check_local_processes("--nproc-per-node", local)
    # what `shoal run` checks before any worker starts, each worker would refuse too (the agent
    # restarting them --max-restarts times first); building the job may take a while, and a
    # SIGTERM then is told in one line, as the agent tells one once it runs
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        config = parse_config(job_argv(torchrun_args))
        job = check_job(config)
        check_before_agent(config, agent_run_id(torchrun_args, max_nodes), job)
    except _Stopped:
        sys.stderr.write("shoal: stopped by SIGTERM before any worker started\n")
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    return launch(torchrun_args)


class _Stopped(BaseException):
    """SIGTERM during the checks (a BaseException: no `except Exception` of a job's holds it)."""


def _stop(signum, frame) -> None:
    raise _Stopped
