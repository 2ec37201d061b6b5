"""`shoal simulate`: replay a workload on a simulated cluster under one or more policies.

Also registers `shoal transient`: replay the transient-server paper's parameter-server training
on a heterogeneous, multi-region spot cluster spec.
"""

from __future__ import annotations

import argparse

from shoal.cli.flags import ascii_float, ascii_int, nonempty, nonempty_path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="trace-driven cluster simulation of scheduling policies",
        description="Replay a workload on a simulated GPU cluster; write jobs CSV, summary, plots.",
    )
    p.add_argument("--policy", type=nonempty, default="shoal", help="policy name (see --list)")
    p.add_argument("--compare", help="comma-separated policies to run and print side by side")
    p.add_argument(
        "--workload",
        type=nonempty,
        default="pollux:6",
        help="CSV path (Pollux, EasyScale or Philly format), pollux:N[:LOAD], or philly:N[:SEED]",
    )
    p.add_argument(
        "--cluster",
        type=nonempty,
        default="pollux",
        help="preset or spec such as 16x4xt4 or 4x4xv100:spot,4x4xt4",
    )
    p.add_argument(
        "--spot",
        type=nonempty,
        help="FRACTION[:MODEL]: buy this fraction of each node group as spot (rounded half up); "
        "MODEL revokes them and the cluster's own :spot nodes: gce, bathtub, p3, g4dn or none "
        "(default gce)",
    )
    p.add_argument(
        "--seed",
        type=ascii_int,
        default=0,
        help="seed of the spot revocations and of a Philly sample without its own",
    )
    p.add_argument(
        "--tick", type=ascii_float, default=60.0, help="scheduling interval, s (1 to 86,400)"
    )
    p.add_argument(
        "--restart-s", type=ascii_float, default=30.0, help="checkpoint-restart overhead (<= 3,600)"
    )
    p.add_argument(
        "--rescale-s", type=ascii_float, default=10.0, help="in-place rescale overhead (<= 3,600)"
    )
    p.add_argument(
        "--out", type=nonempty_path, help="output directory (per policy subfolder with --compare)"
    )
    p.add_argument(
        "--no-plots",
        action="store_true",
        help="with --out: write no PNG plots (and remove an earlier run's)",
    )
    p.add_argument(
        "--scenario",
        metavar="FILE",
        help="replay one run's scenario (a live run's OUT/scenario.json): its time, cost and "
        "revocations on the emulated provider, driven by the same scaler",
    )
    p.add_argument("--json", action="store_true", help="with --scenario: print the result as JSON")
    p.add_argument("--list", action="store_true", help="list policies and cluster presets")
    p.set_defaults(func=_run)
    _register_transient(subparsers)


def _register_transient(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "transient",
        help="parameter-server training on a transient (spot) cluster, many seeded runs",
        description="Replay ResNet-32/CIFAR-10 parameter-server training (ICAC'19) on a cluster of "
        "spot and on-demand GPU servers; step times from the PS model fitted to the paper's runs.",
    )
    p.add_argument(
        "--cluster",
        required=True,
        help="[Nx]KIND[@REGION][:TIER[=USD_PER_HOUR]],... e.g. 4xk80@us-east1:spot,1xv100@us-west1"
        ",ps@us-east1 (0xps: no server, one worker); or @FILE with one or more items per line",
    )
    p.add_argument(
        "--runs",
        type=ascii_int,
        default=200,
        help="seeded runs to average (at most 1,000,000, and runs x servers at most 1,000,000)",
    )
    p.add_argument(
        "--seed",
        type=ascii_int,
        default=0,
        help="seed of the revocations (run i draws from (seed, i))",
    )
    p.add_argument(
        "--steps", type=ascii_int, default=64000, help="training steps per run (at most 10^12)"
    )
    p.add_argument(
        "--fit",
        choices=("all", "size", "kind"),
        default="all",
        help="measurements the model is fitted on: all, or a held-out split's fit side",
    )
    p.add_argument(
        "--by-region",
        action="store_true",
        help="draw lifetimes per kind and region where measured (default: per kind)",
    )
    p.set_defaults(func=_run_transient)


def _run(args: argparse.Namespace) -> int:
    from shoal.errors import UserError
    from shoal.sim.run import list_choices, simulate_cli

    if args.json and args.scenario is None:  # was ignored: a table where JSON was asked for
        raise UserError("--json needs --scenario (a policy run prints a table; --out writes JSON)")
    if args.scenario is not None:  # --scenario '' ran the default policy simulation
        return _run_scenario(args)
    if args.list:
        print(list_choices())
        return 0
    print(simulate_cli(args))
    return 0


def _run_scenario(args: argparse.Namespace) -> int:
    import json

    from shoal.control.scaler import Goal
    from shoal.errors import UserError
    from shoal.sim.replay import simulate
    from shoal.sim.scenario import load_scenario

    sc = load_scenario(args.scenario)
    try:
        result = simulate(sc)
    except UserError as exc:  # e.g. no capacity: name the file, as its load's errors do
        raise UserError(f"--scenario {args.scenario}: {exc}") from None
    if args.json:
        print(json.dumps(result.summary(), sort_keys=True))
        return 0
    by_kind = ", ".join(f"{k} {usd:.4f}" for k, usd in result.cost_by_kind.items()) or "none"
    # a goal missed at the end, in the live end line's words (a fixed mix has no goal)
    goal = Goal(**sc.goal) if sc.autoscale else None
    over, late = goal.missed_words(result.cost_usd, result.time_s) if goal else ("", "")
    print(
        f"scenario {args.scenario}: time {result.time_s:.1f} s ({result.time_s / 3600:.2f} h), "
        f"cost {result.cost_usd:.4f} USD{over}, revocations {result.revocations}, "
        f"membership changes {result.changes}, steps lost {result.lost_steps:.1f}{late}\n"
        f"cost by kind (USD): {by_kind}"
    )
    return 0


def _run_transient(args: argparse.Namespace) -> int:
    from shoal.sim.transient_report import transient_cli

    print(transient_cli(args))
    return 0
