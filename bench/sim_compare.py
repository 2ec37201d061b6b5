"""Policies side by side on the Pollux workloads and on Philly samples with spot revocations.

Runs every policy on (a) Pollux's workload-1..8 on Pollux's cluster (16 nodes x 4 T4, on-demand)
and (b) 5 seeded samples of 300 consecutive Philly jobs on the heterogeneous 64-GPU cluster
(4x4 each of V100, P100, T4, K80) with half the nodes bought as spot, revoked by the measured GCE
lifetimes. Prints one JSON line per run, then mean and standard deviation per policy and suite
(the deviation null where a suite ran one case).
Usage: python bench/sim_compare.py [--cases N] [policy ...]   (default: all; N: the first N
cases of each suite, e.g. 2 for a smoke run)
"""

from __future__ import annotations

import argparse
import json
import statistics

from shoal.sim.policies import POLICIES
from shoal.sim.run import simulate
from shoal.sim.simulator import SimConfig

SUITES = {
    "pollux": [(f"pollux:{i}", "pollux", None, 0) for i in range(1, 9)],
    "philly-spot": [(f"philly:300:{s}", "hetero-64", "0.5:gce", s) for s in range(1, 6)],
}


def main(policies: list[str], cases_per_suite: int | None = None) -> None:
    table: dict[tuple[str, str], list[dict]] = {}
    for suite, cases in SUITES.items():
        for workload, cluster, spot, seed in cases[:cases_per_suite]:
            for policy in policies:
                s = simulate(policy, workload, cluster, spot, SimConfig(seed=seed))
                row = {"suite": suite, "workload": workload, "seed": seed, **s}
                print(json.dumps(row), flush=True)
                table.setdefault((suite, policy), []).append(s)
    for (suite, policy), runs in table.items():
        out = {"suite": suite, "policy": policy, "runs": len(runs)}
        for key in ("avg_jct_s", "total_cost_usd", "makespan_s"):
            values = [r[key] for r in runs]
            out[key + "_mean"] = round(statistics.mean(values), 1)
            # no spread over one case (--cases 1): null, not a standard deviation
            out[key + "_sd"] = round(statistics.stdev(values), 1) if len(values) > 1 else None
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "policies",
        nargs="*",
        metavar="policy",
        help=f"the policies to run (None: all of {', '.join(POLICIES)})",
    )
    p.add_argument(
        "--cases",
        type=int,
        metavar="N",
        help="the first N cases of each suite, e.g. 2 for a smoke run (None: all)",
    )
    args = p.parse_args()
    unknown = [name for name in args.policies if name not in POLICIES]
    if unknown:
        p.error(f"unknown policy {', '.join(map(repr, unknown))} (known: {', '.join(POLICIES)})")
    if args.cases is not None and args.cases < 1:
        p.error(f"--cases must be at least 1, not {args.cases}")
    main(args.policies or list(POLICIES), args.cases)
