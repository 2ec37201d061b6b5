"""`shoal run JOB.py --workers SPEC --steps N --out DIR`: train on local (emulated) workers."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from shoal.runtime.loop import add_launcher_arguments

    p = sub.add_parser("run", help="train a job file on local workers of emulated device kinds")
    add_launcher_arguments(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from shoal.errors import UserError
    from shoal.launcher.events import parse_events
    from shoal.launcher.spec import RunSpec, run_local
    from shoal.perf.devices import load_devices

    if args.resume and args.out and args.out != args.resume:
        raise UserError("--resume DIR continues the run in DIR: drop --out or make it DIR")
    out = args.resume or args.out
    if not out:
        raise UserError("the following arguments are required: --out (or --resume DIR)")
    catalog = load_devices()
    events = parse_events(args.events) if args.events else []
    for e in events:
        if e.kind:
            catalog.kind(e.kind)
    spec = RunSpec(
        job=args.job,
        kinds=catalog.parse_workers(args.workers),
        steps=args.steps,
        out=out,
        consistency=args.consistency,
        seed=args.seed,
        options=args.option,
        replan_every=args.replan_every,
        max_micro_batches=args.max_micro_batches,
        threads=args.threads,
        events=events,
        checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=args.checkpoint_seconds,
        checkpoint_dir=args.checkpoint_dir,
        resume=args.resume is not None,
    )
    result = run_local(spec)
    print(
        f"done: {result['final_step']} steps in {result['wall_time_s']:.1f}s, "
        f"{result['samples_per_s']:,.0f} samples/s, state_sha256 {result['state_sha256']}"
    )
    return 0
