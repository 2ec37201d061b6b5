"""`shoal transient`: one cluster spec, many seeded runs, a short text summary.

Builds the cluster (`shoal.sim.transient_spec`), fits the parameter-server model on the chosen
measurements (`shoal.sim.transient_model`, `shoal.sim.transient_fit`), replays the runs
(`shoal.sim.transient`) and says what a user needs: the starting step rate per worker kind,
mean time and cost with their spread, and how many runs failed or lost workers.
"""

from __future__ import annotations

import argparse
from collections import Counter

from shoal.errors import UserError
from shoal.sim.transient import ClusterConfig, replicate_cluster
from shoal.sim.transient_data import load_measurements
from shoal.sim.transient_fit import make_split
from shoal.sim.transient_model import PSModel, fit
from shoal.sim.transient_spec import TransientCluster, parse_cluster


def fitted_model(fit_on: str = "all") -> PSModel:
    """The model fitted on all the measurements, or on one split's fit side."""
    return fit(load_measurements()) if fit_on == "all" else make_split(fit_on).model()


def model_for(cluster: TransientCluster, fitted: PSModel) -> PSModel:
    """The fitted model, with any cluster kind it lacks placed by the device table."""
    model = fitted
    for kind in sorted({w.kind for w in cluster.workers} - set(model.compute_s)):
        model = model.with_kind_from_devices(kind)
    return model


def _placeable(fitted: PSModel, kind: str) -> None:
    """UserError when `kind` is neither fitted nor placeable by the device table (checked as
    the spec is parsed, so the error names the item: a bare "no measured ... speed" did not)."""
    if kind not in fitted.compute_s:
        fitted.with_kind_from_devices(kind)


def _describe(cluster: TransientCluster) -> str:
    groups = Counter((s.kind, s.region, s.tier, s.price_usd_per_hour) for s in cluster.workers)
    groups.update((s.kind, s.region, s.tier, s.price_usd_per_hour) for s in cluster.servers)
    return ", ".join(
        f"{n}x{kind}@{region}:{tier} ${price:g}/h"
        for (kind, region, tier, price), n in groups.items()
    )


# A replay costs ~10-20 us per server and run, so 1,000,000 server-runs take ~20 s at worst
# (--runs 999999999 hung). Generous: the paper averages a few hundred runs of 8 or 9 servers.
MAX_RUNS = 1_000_000
MAX_SERVER_RUNS = 1_000_000  # runs x servers
# 15 million times the paper's 64,000 steps, centuries of training: beyond it the hours mean
# nothing, and past ~1e308 the count is no float (a traceback)
MAX_STEPS = 10**12


def _check_sizes(args: argparse.Namespace) -> None:
    if args.runs < 1 or args.steps < 1:
        raise UserError("--runs and --steps must be >= 1")
    if args.runs > MAX_RUNS:
        raise UserError(f"--runs {args.runs}: at most {MAX_RUNS:,}")
    if args.steps > MAX_STEPS:
        raise UserError(f"--steps {args.steps}: at most {MAX_STEPS:,}")


def transient_cli(args: argparse.Namespace) -> str:
    _check_sizes(args)
    fitted = fitted_model(args.fit)
    cluster = parse_cluster(args.cluster, check_kind=lambda kind: _placeable(fitted, kind))
    servers = len(cluster.workers) + len(cluster.servers)
    if args.runs * servers > MAX_SERVER_RUNS:
        raise UserError(
            f"--runs {args.runs} x {servers:,} servers: at most {MAX_SERVER_RUNS:,} runs x servers"
        )
    model = model_for(cluster, fitted)
    cfg = ClusterConfig(cluster, model, total_steps=args.steps, by_region=args.by_region)
    kinds = [w.kind for w in cluster.workers]
    times = model.step_times_s(kinds, len(cluster.servers))
    per_kind = {k: t for k, t in zip(kinds, times, strict=True)}
    s = replicate_cluster(cfg, args.runs, args.seed)
    lines = [
        f"cluster: {_describe(cluster)}",
        f"model (fit on {args.fit}): {model.steps_per_s(kinds, len(cluster.servers)):.2f} steps/s "
        "at start; s/step per worker: "
        + ", ".join(f"{k} {t * 1000:.1f} ms" for k, t in sorted(per_kind.items())),
        f"runs: {s.runs}, completed {s.completed}"
        + (" (the rest lost their chief or a server)" if s.completed < s.runs else ""),
    ]
    if s.completed:
        lines.append(
            f"time: {s.mean_hours:.3f} h +- {s.sd_hours:.3f}; "
            f"cost: ${s.mean_cost_usd:.3f} +- {s.sd_cost_usd:.3f} (completed runs)"
        )
    lines.append(f"revoked workers: {s.revoked} of {s.servers} ({s.revoked / s.servers:.1%})")
    if cluster.cross_region_workers:
        lines.append(
            f"note: {cluster.cross_region_workers} worker(s) outside the parameter servers' "
            "region; cross-region latency is not in the fitted data and is not charged"
        )
    return "\n".join(lines)
