"""`shoal run JOB.py --workers SPEC --steps N --out DIR`: train on local (emulated) workers."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from shoal.runtime.worker import add_run_arguments

    p = sub.add_parser("run", help="train a job file on local workers of emulated device kinds")
    add_run_arguments(p)
    p.add_argument(
        "--workers",
        required=True,
        metavar="SPEC",
        help="device kinds, one per worker: e.g. v100,k80,k80 or 2xv100,k80",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from shoal.cluster import load_catalog
    from shoal.launcher.local import RunSpec, run_local

    spec = RunSpec(
        job=args.job,
        kinds=load_catalog().parse_workers(args.workers),
        steps=args.steps,
        out=args.out,
        consistency=args.consistency,
        seed=args.seed,
        options=args.option,
        replan_every=args.replan_every,
        threads=args.threads,
    )
    result = run_local(spec)
    print(
        f"done: {result['final_step']} steps in {result['wall_time_s']:.1f}s, "
        f"{result['samples_per_s']:,.0f} samples/s, state_sha256 {result['state_sha256']}"
    )
    return 0
