"""Front door of the simulator: build a run from user-level options and report it."""

from __future__ import annotations

from argparse import Namespace
from collections import Counter
from pathlib import Path

from shoal.cluster.nodes import PRESETS, parse_cluster
from shoal.cluster.revocation import revocation_model
from shoal.errors import UserError
from shoal.sim.policies import POLICIES, make_policy
from shoal.sim.report import format_comparison, summarize, write_outputs
from shoal.sim.simulator import SimConfig, Simulator
from shoal.sim.workloads import load_workload


def list_choices() -> str:
    presets = "\n".join(f"  {k:12s} {v}" for k, v in PRESETS.items())
    return f"policies: {', '.join(POLICIES)}\ncluster presets:\n{presets}"


def parse_spot(spec: str | None) -> tuple[float, str]:
    if not spec:
        return 0.0, "none"
    fraction, _, model = spec.partition(":")
    try:
        value = float(fraction)
    except ValueError:
        raise UserError(f"bad --spot fraction {fraction!r} (expected a number in [0, 1])") from None
    return value, model or "gce"


def simulate(
    policy: str,
    workload: str,
    cluster: str,
    spot: str | None = None,
    config: SimConfig | None = None,
    out: Path | None = None,
    plots: bool = True,
) -> dict:
    """Run one policy; write outputs to `out` if given; return the summary."""
    config = config or SimConfig()
    fraction, model = parse_spot(spot)
    spec = parse_cluster(cluster).with_spot_fraction(fraction)
    jobs = load_workload(workload, seed=config.seed)
    kinds = {g.kind for g in spec.groups}
    for job in jobs:
        if job.preferred_kind and job.preferred_kind not in kinds:
            raise UserError(f"job {job.name} prefers {job.preferred_kind}, absent from the cluster")
    result = Simulator(jobs, spec, make_policy(policy), config, revocation_model(model)).run()
    if out is not None:
        return write_outputs(result, out, plots=plots)
    return summarize(result)


def _check_out(out: Path) -> None:
    """An output directory that cannot be made (a file in its place) fails before any work."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write to --out {str(out)!r}: {exc.strerror or exc}") from None


def simulate_cli(args: Namespace) -> str:
    config = SimConfig(
        tick_s=args.tick, restart_s=args.restart_s, rescale_s=args.rescale_s, seed=args.seed
    )
    policies = args.compare.split(",") if args.compare else [args.policy]
    # each name once: a repeat ran the same simulation again and wrote over its own output
    # (--compare shoal,shoal,... as long as a command line runs for hours)
    repeated = [name for name, n in Counter(policies).items() if n > 1]
    if repeated:
        raise UserError(f"--compare names {repeated[0]!r} more than once")
    # with --compare, each policy writes its own subdirectory of --out
    outs = [args.out / p if args.compare else args.out for p in policies] if args.out else []
    for name in policies:
        make_policy(name)  # fail on a bad name before any work
    for out in outs:
        _check_out(out)  # ... or on a file where an output directory goes
    summaries = []
    for name, out in zip(policies, outs or [None] * len(policies), strict=True):
        summaries.append(
            simulate(name, args.workload, args.cluster, args.spot, config, out, not args.no_plots)
        )
    return format_comparison(summaries)
