"""The torchrun entry: one worker process, as `python -m shoal.worker JOB.py --steps N --out DIR`
(or a job file calling `shoal.launch`) runs it under torchrun or `shoal run`.

Under `shoal run` the configuration arrives whole in SHOAL_CONFIG (`RunConfig.to_env`) and argv
is empty; under torchrun it is parsed from argv, with the emulation knobs from the environment.
"""

from __future__ import annotations

import os
import sys

from shoal.config import EmulationConfig, RunConfig
from shoal.config.provider import flags_given
from shoal.console import console_outlives_its_reader
from shoal.errors import StorageError, UserError
from shoal.launcher.rundir import NO_CHECKPOINT, checkpoint_dir, config_fingerprint
from shoal.runtime.checkpoint import (
    check_resumable,
    foreign_checkpoints,
    latest_checkpoint_step,
)
from shoal.runtime.outputs import prepare_out_dir
from shoal.runtime.torchrun_front import report_to_agent


def parse_config(argv: list[str] | None = None) -> RunConfig:
    """The worker's configuration: SHOAL_CONFIG when a launcher set it, else the flags."""
    from shoal.cli.flags import HelpFormatter, RaisingParser, add_flags, from_args

    given = RunConfig.from_env()
    if given is not None and not argv:
        return given
    parser = RaisingParser(prog="python -m shoal.worker", formatter_class=HelpFormatter)
    add_flags(parser, RunConfig)
    args = parser.parse_args(argv)
    # torchrun's processes are its own: nothing to buy or revoke. Checked before the provider's
    # own check, which told `--spot-trace F` alone to add --provider local, then refused that
    given = flags_given(lambda name: getattr(args, f"provider_{name}"))
    if given:
        raise UserError(
            f"{given[0]}: the provider's flags are for `shoal run` (local workers), not torchrun"
        )
    return from_args(RunConfig, args, emulation=EmulationConfig.from_environ())


def check_fresh_start(config: RunConfig, run_id: str | None) -> None:
    """A torchrun job refuses a directory holding another run's checkpoints (it would restart
    from step 0 and overwrite them), as `shoal run` does; --resume continues it. Runs are told
    apart by torchrun's job id `run_id` (its --rdzv-id; None: one no checkpoint can hold),
    which the checkpoints record. Each worker checks, each of the agent's restarts included
    (under plain torchrun a first life that refused them wrote none of its own, and its restart
    would otherwise have resumed the other run's); `shoal torchrun` checks first
    (`check_before_agent`)."""
    if config.resume:
        return
    url = checkpoint_dir(config)
    found = foreign_checkpoints(url, run_id)
    if found:
        raise UserError(
            f"{url} already holds checkpoints of another run ({len(found)} found): pass "
            "--resume to continue it, or choose another --out"
        )


def check_before_agent(config: RunConfig, run_id: str | None, job) -> None:
    """What `shoal torchrun` refuses about the run directory before the agent starts, where each
    worker would refuse it only after the group formed, and again after each of the agent's
    --max-restarts: another run's checkpoints without --resume, and with it a directory with
    no usable checkpoint of this job (another job's, or only corrupt ones), as `shoal run`
    does (`job`: the job, built by `check_job`). The workers check again as they load (plain
    torchrun has no front)."""
    if config.resume:
        check_resumable(checkpoint_dir(config), config_fingerprint(config, job))
    else:
        check_fresh_start(config, run_id)
    # a file where --out goes: each worker printed its traceback, then the error (shoal run's
    # check_run makes the directory so too)
    prepare_out_dir(config.out)


def cli(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # under torchrun the worker's lines go to the agent's console: a `| head` there failed
    # every worker at its first line, as bad input in the job's code (exit code 2)
    with console_outlives_its_reader():
        return _worker(argv)


def _worker(argv: list[str]) -> int:
    try:
        config = parse_config(argv)
        if RunConfig.from_env() is None:  # started by torchrun, not by `shoal run`
            check_fresh_start(config, os.environ.get("TORCHELASTIC_RUN_ID"))
        from shoal.runtime.loop import main

        return main(config)
    except ValueError as exc:
        if not report_to_agent(str(exc)):  # under `shoal torchrun` the front says it once
            sys.stderr.write(f"shoal: error: {exc}\n")
        return 2
    except StorageError as exc:  # under torchrun (shoal run's worker made it a UserError)
        said = f"{exc}; {torchrun_resume_hint(config)}"
        if not report_to_agent(said):
            sys.stderr.write(f"shoal: run failed: {said}\n")
        return 1


def torchrun_resume_hint(config: RunConfig) -> str:
    """What a torchrun worker stopped by a disk that refused a write recommends: the same
    command with --resume, once the disk takes writes, if a checkpoint is there to resume."""
    step = latest_checkpoint_step(checkpoint_dir(config))
    if step is None:
        return NO_CHECKPOINT
    return (
        f"once the disk takes writes, continue from the checkpoint of step {step} with the "
        "same command and --resume"
    )


def run_as_script() -> None:
    code = cli()
    # Every output is written and closed by now. Interpreter shutdown can block for many
    # seconds in torch.distributed teardown, which would delay the controller's next decision.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
