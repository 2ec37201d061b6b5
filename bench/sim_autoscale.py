"""The spot scaler in the scenario simulator: scaler, all on-demand, and its first mix held.

    python bench/sim_autoscale.py [CASE ...] [--seeds N]

A CASE is MODEL:DEADLINE_S:STEPS (MODEL: a spot lifetime model, gce, p3, g4dn, ...); without
one, the five of docs/notes/autoscaling.md ("Figures"): gce:14400:20000, gce:43200:60000,
p3:14400:20000, p3:3600:20000, g4dn:14400:20000. The job: a global batch of 256 (8
micro-batches of 32), a V100 micro-batch 0.1 s, 0.05 s of overhead per step, 5 s per membership
change; kinds k80, p100, v100, start-up 60 s, notice 30 s, at most 8 servers, a decision every
600 s, a checkpoint every 600 s. Four strategies per seed (provider seeds 0..N-1), each a replay
(`shoal.sim.replay`): the scaler with spot and on-demand; the same scaler without spot; the
scaler's first mix held, recovering as shoal does (elastic); the same mix restarting from the
last checkpoint at any revocation (SkyPilot's managed spot). Prints a markdown table per case
(time mean [max], cost mean, saving against all on-demand, revocations, steps lost per
revocation, deadlines met), the note's format. About a minute on one core for the five.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from spot_savings import decided_mix

from shoal.cluster.revocation import revocation_model
from shoal.errors import UserError
from shoal.sim.replay import simulate
from shoal.sim.scenario import Scenario

KINDS = ("k80", "p100", "v100")
CASES = ("gce:14400:20000", "gce:43200:60000", "p3:14400:20000", "p3:3600:20000")
CASES += ("g4dn:14400:20000",)
STRATEGIES = ("scaler (spot+on-demand)", "all on-demand (same scaler, no spot)")
STRATEGIES += ("scaler's first mix held, shoal (elastic)", "same mix, restart from checkpoint")


def case(text: str) -> tuple[str, float, int]:
    """MODEL:DEADLINE_S:STEPS, checked (an argparse type: a bad one is a usage error)."""
    model, deadline, steps = (text.split(":") + ["", ""])[:3]
    try:
        revocation_model(model)
        deadline_s, n = float(deadline), int(steps)
    except (UserError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected MODEL:DEADLINE_S:STEPS ({exc})"
        ) from None
    if not (0 < deadline_s < 1e7 and n >= 1):
        raise argparse.ArgumentTypeError(f"{text!r}: the deadline and steps must be positive")
    return model, deadline_s, n


def scenario(model: str, deadline_s: float, steps: int, seed: int, **extra) -> Scenario:
    provider = {
        "kinds": ",".join(KINDS), "seed": seed, "startup_s": 60.0, "notice_s": 30.0,
        "spot_lifetimes": ",".join(f"{k}:{model}" for k in KINDS),
        "quota": extra.pop("quota", None),
    }  # fmt: skip
    fields = dict(
        steps=steps, micro_batch_size=32, batch=((0, 256),), host_s=0.1, slowdowns={},
        step_overhead_s=0.05, change_cost_s=5.0, provider=provider,
        goal={"deadline_s": deadline_s}, max_servers=8, scale_every_s=600.0, autoscale=True,
        initial={}, checkpoint_every_s=600.0,
    )  # fmt: skip
    return Scenario(**{**fields, **extra})


def replays(model: str, deadline_s: float, steps: int, seed: int) -> list:
    """One seed's four strategies, in STRATEGIES' order."""
    auto = simulate(scenario(model, deadline_s, steps, seed))
    held = decided_mix(auto)
    no_spot = {f"{k}:spot": 0 for k in KINDS}
    fixed = dict(autoscale=False, initial=held)
    return [
        auto,
        simulate(scenario(model, deadline_s, steps, seed, quota=no_spot)),
        simulate(scenario(model, deadline_s, steps, seed, **fixed)),
        simulate(scenario(model, deadline_s, steps, seed, **fixed, restart_from_checkpoint=True)),
    ]


def table(model: str, deadline_s: float, steps: int, seeds: int) -> str:
    runs = list(zip(*(replays(model, deadline_s, steps, seed) for seed in range(seeds))))
    on_demand = statistics.mean(r.cost_usd for r in runs[1])
    out = [
        f"{model} lifetimes, deadline {deadline_s:g} s, {steps:,} steps, seeds 0-{seeds - 1}:",
        "",
        "| strategy | time (h), mean [max] | cost (USD), mean | vs on-demand "
        "| revocations (total) | steps lost per revocation | met deadline |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rs in zip(STRATEGIES, runs, strict=True):
        revoked, lost = sum(r.revocations for r in rs), sum(r.lost_steps for r in rs)
        cost, hours = statistics.mean(r.cost_usd for r in rs), [r.time_s / 3600 for r in rs]
        per = f"{lost / revoked:.2f}" if revoked else "-"
        met = sum(r.time_s <= deadline_s for r in rs)
        out.append(
            f"| {name} | {statistics.mean(hours):.2f} [{max(hours):.2f}] | {cost:.2f} "
            f"| {100 * (1 - cost / on_demand):+.1f} % | {revoked} | {per} | {met}/{len(rs)} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("cases", nargs="*", type=case, help="MODEL:DEADLINE_S:STEPS (none: the five)")
    p.add_argument("--seeds", type=int, default=10, help="provider seeds 0..N-1")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be at least 1, not {args.seeds}")
    for model, deadline_s, steps in args.cases or [case(c) for c in CASES]:
        print(table(model, deadline_s, steps, args.seeds) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
