"""`shoal simulate`: replay a workload on a simulated cluster under one or more policies."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="trace-driven cluster simulation of scheduling policies",
        description="Replay a workload on a simulated GPU cluster; write jobs CSV, summary, plots.",
    )
    p.add_argument("--policy", default="shoal", help="policy name (see --list)")
    p.add_argument("--compare", help="comma-separated policies to run and print side by side")
    p.add_argument(
        "--workload",
        default="pollux:6",
        help="CSV path (Pollux, EasyScale or Philly format), pollux:N, or philly:N[:SEED]",
    )
    p.add_argument(
        "--cluster", default="pollux", help="preset or spec such as 16x4xt4 or 4x4xv100:spot,4x4xt4"
    )
    p.add_argument(
        "--spot",
        help="FRACTION[:MODEL]: buy this fraction of nodes as spot; MODEL = gce, bathtub, p3, "
        "g4dn or none (default gce)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tick", type=float, default=60.0, help="scheduling interval, s")
    p.add_argument("--restart-s", type=float, default=30.0, help="checkpoint-restart overhead")
    p.add_argument("--rescale-s", type=float, default=10.0, help="in-place rescale overhead")
    p.add_argument(
        "--out", type=Path, help="output directory (per policy subfolder with --compare)"
    )
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--list", action="store_true", help="list policies and cluster presets")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from shoal.sim.run import list_choices, simulate_cli

    if args.list:
        print(list_choices())
        return 0
    print(simulate_cli(args))
    return 0
