"""Front door of the simulator: build a run from user-level options and report it."""

from __future__ import annotations

import sys
import tempfile
from argparse import Namespace
from collections import Counter
from pathlib import Path

from shoal.cluster.nodes import PRESETS, ClusterSpec, parse_cluster, spot_nodes
from shoal.cluster.revocation import revocation_model
from shoal.digits import ascii_digits
from shoal.errors import UserError
from shoal.sim.policies import POLICIES, make_policy
from shoal.sim.report import format_comparison, summarize, write_outputs
from shoal.sim.simulator import SimConfig, Simulator
from shoal.sim.workloads import load_workload


def list_choices() -> str:
    presets = "\n".join(f"  {k:12s} {v}" for k, v in PRESETS.items())
    return f"policies: {', '.join(POLICIES)}\ncluster presets:\n{presets}"


def parse_spot(spec: str | None) -> tuple[float, str]:
    """(fraction, revocation model) of `--spot FRACTION[:MODEL]`. Without --spot no node is
    made spot, but the cluster's own `:spot` nodes are revoked by the default model, gce (they
    were never revoked: the model was none)."""
    if spec is None:
        return 0.0, "gce"
    fraction, colon, model = spec.partition(":")
    if colon and not model:  # '0.5:' took the default model without a word
        raise UserError(f"bad --spot {spec!r}: no revocation model after ':'")
    try:
        value = float(ascii_digits(fraction))
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
    spec = _with_spot(parse_cluster(cluster), fraction)
    jobs = load_workload(workload, seed=config.seed)
    kinds = {g.kind for g in spec.groups}
    for job in jobs:
        if job.preferred_kind and job.preferred_kind not in kinds:
            raise UserError(f"job {job.name} prefers {job.preferred_kind}, absent from the cluster")
    result = Simulator(jobs, spec, make_policy(policy), config, revocation_model(model)).run()
    if out is None:
        return summarize(result)
    try:
        return write_outputs(result, out, plots=plots)
    except OSError as exc:  # e.g. a directory where jobs.csv goes: one line, not a traceback
        raise UserError(f"cannot write to --out {str(out)!r}: {_reason(exc)}") from None


def _with_spot(cluster: ClusterSpec, fraction: float) -> ClusterSpec:
    """`cluster` with `fraction` of each group bought as spot; a warning names the groups in
    which a nonzero fraction buys no node (0.2 of 2 nodes: none, silently)."""
    spotted = cluster.with_spot_fraction(fraction)
    if fraction > 0:
        missed = [
            g for g in cluster.groups if g.tier != "spot" and not spot_nodes(g.count, fraction)
        ]
        if missed:
            items = ", ".join(f"{g.count}x{g.gpus_per_node}x{g.kind}" for g in missed)
            sys.stderr.write(
                f"shoal: warning: --spot {fraction:g} buys no spot node in {items} "
                "(the fraction of its node count rounds to 0)\n"
            )
    return spotted


def _reason(exc: OSError) -> str:
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc)


def _check_out(out: Path) -> None:
    """An output directory that cannot be made (a file in its place) or written (read-only,
    immutable) fails before any work: a probe file is created in it and removed."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".shoal-probe-"):
            pass
    except OSError as exc:
        raise UserError(f"cannot write to --out {str(out)!r}: {exc.strerror or exc}") from None


def simulate_cli(args: Namespace) -> str:
    config = SimConfig(
        tick_s=args.tick, restart_s=args.restart_s, rescale_s=args.rescale_s, seed=args.seed
    )
    policies = args.compare.split(",") if args.compare is not None else [args.policy]
    if not all(policies):  # --compare '' ran --policy instead
        raise UserError(f"--compare {args.compare!r} names an empty policy (expected A,B,...)")
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
