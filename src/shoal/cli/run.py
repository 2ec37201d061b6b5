"""`shoal run JOB.py --workers SPEC --steps N --out DIR`: train on local (emulated) workers."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from shoal.cli.flags import add_flags, from_args
from shoal.config import EmulationConfig, LaunchConfig, RunConfig
from shoal.config.provider import split_tiers
from shoal.console import done_line

# `shoal run` reads two of the workers' flags its own way: --resume names the run to continue
# (its directory stands in for --out), so --out is no longer required.
RUN_OVERRIDES = {
    "--out": {
        "required": False,
        "default": None,
        "help": "run directory for metrics, result, checkpoints (or --resume DIR)",
    },
    "--resume": {
        "action": "store",
        "metavar": "DIR",
        "default": None,
        "help": "continue the run in DIR from its newest valid checkpoint",
    },
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="train a job file on local workers of emulated device kinds")
    add_flags(p, RunConfig, RUN_OVERRIDES)
    add_flags(p, LaunchConfig)
    p.set_defaults(func=_run)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The workers' configuration from `shoal run`'s flags (--resume DIR included)."""
    from shoal.errors import UserError
    from shoal.perf.devices import load_devices  # numpy: not at every command's start

    if args.resume and args.out and args.out != args.resume:
        raise UserError("--resume DIR continues the run in DIR: drop --out or make it DIR")
    out = args.resume or args.out
    if not out:
        raise UserError("the following arguments are required: --out (or --resume DIR)")
    config = from_args(
        RunConfig,
        args,
        out=out,
        resume=args.resume is not None,
        # the catalog's slowdown per worker (spec.py), not SHOAL_SLOWDOWN, a torchrun knob
        emulation=EmulationConfig.from_environ({**os.environ, "SHOAL_SLOWDOWN": ""}),
    )
    # --batch-reference left unset is the launcher's to fill from the workers (spec.py
    # `with_implied_reference`), once check_batch has told a given one from none
    if config.provider.name and not config.provider.kinds:  # the scaler buys these kinds
        workers = worker_kinds(args.workers, config)
        kinds = ",".join(dict.fromkeys(load_devices().parse_workers(workers)))  # not "2xk80"
        provider = dataclasses.replace(config.provider, kinds=kinds)
        config = dataclasses.replace(config, provider=provider)
    elif config.provider.name:  # the --workers servers are bought from the provider too
        devices = load_devices()
        offered = {devices.check(k) for k in config.provider.kind_list}
        for kind in devices.parse_workers(worker_kinds(args.workers, config)):
            if kind not in offered:  # was refused at launch, the run directory written
                raise UserError(f"--workers {kind}: not among --kinds {config.provider.kinds}")
    return config


def worker_kinds(workers: str, config: RunConfig) -> str:
    """--workers without its tiers (`k80:spot`: a spot server, with --provider only)."""
    if not config.provider.name:
        return workers
    return split_tiers(workers)[0]


def _run(args: argparse.Namespace) -> int:
    from shoal.cli import outcome_known
    from shoal.launcher.events import parse_events
    from shoal.launcher.spec import RunSpec, run_local
    from shoal.perf.devices import load_devices

    started = time.monotonic()
    config = config_from_args(args)
    devices = load_devices()
    events = parse_events(args.events) if args.events else []
    for e in events:
        if e.kind:
            devices.kind(e.kind)
    tiers = []
    if config.provider.name:
        tiers = split_tiers(args.workers)[1]
    spec = RunSpec(config, devices.parse_workers(worker_kinds(args.workers, config)), events, tiers)
    result = run_local(spec, verbose=args.verbose)
    outcome_known(args)
    # training time (what samples/s is over) and the command's own, start-up included; a run
    # finished earlier reports its own time, not this command's
    total = time.monotonic() - started
    took = "earlier" if result.get("earlier") else f"{total:.1f}s with start-up"
    print(done_line(result, took))
    return 0
