"""The ICAC'19 transient-server experiment: our mean time/cost vs the paper's, many seeded runs.

Four modes, each a replay of 2, 4 and 8 preemptible K80s (+ 1 on-demand parameter server) with
the measured K80 preemptible lifetimes:
- `strict`: the measured single-K80 step rate, perfect asynchronous scaling;
- `on-demand-eff`: the same, times the per-worker efficiency of the paper's separate on-demand
  runs of the same size;
- `ps-model`: step rates from the parameter-server model fitted on all 39 measured
  revocation-free configurations (`shoal.sim.transient_model`), what `shoal transient` uses;
- `ps-model-size-split`: the same model fitted on the 1-, 2- and 4-worker configurations only,
  so the 8-K80 cluster is a held-out prediction.
Prints one JSON line per (mode, size), with the paper's mean and sd beside ours, and the pooled
revoked fraction over the paper's 2/4/8 mix.
Usage: python bench/sim_transient.py [RUNS]   (default 5000 per size)
"""

from __future__ import annotations

import argparse
import json

from shoal.sim.transient import (
    ClusterConfig,
    TransientConfig,
    on_demand_efficiency,
    replicate,
    replicate_cluster,
    single_gpu_step_rate,
)
from shoal.sim.transient_data import load_measurements
from shoal.sim.transient_fit import make_split
from shoal.sim.transient_model import fit
from shoal.sim.transient_spec import parse_cluster

MODES = ("strict", "on-demand-eff", "ps-model", "ps-model-size-split")
# the paper's 32 runs per size (k80_spot CSVs, unrounded): hours mean, sd; USD mean, sd
PAPER = {
    2: (2.1568, 0.4994, 1.313, 0.083),
    4: (1.0458, 0.1667, 1.1567, 0.0369),
    8: (0.5112, 0.0144, 1.1145, 0.0222),
}


def main(runs: int) -> None:
    models = {
        "ps-model": fit(load_measurements()),
        "ps-model-size-split": make_split("size").model(),
    }
    for mode in MODES:
        revoked = servers = 0
        for n in (2, 4, 8):
            if mode in models:
                cfg = ClusterConfig(parse_cluster(f"{n}xk80:spot"), models[mode])
                s = replicate_cluster(cfg, runs, seed=2024)
            else:
                eff = 1.0 if mode == "strict" else on_demand_efficiency(n)
                s = replicate(TransientConfig(n, single_gpu_step_rate(), eff), runs, seed=2024)
            revoked += 32 * n * s.revoked / s.servers
            servers += 32 * n
            hours, hours_sd, usd, usd_sd = PAPER[n]
            row = {
                "mode": mode,
                "workers": n,
                "completed": s.completed,
                "runs": s.runs,
                "mean_h": round(s.mean_hours, 4),
                "sd_h": round(s.sd_hours, 4),
                "paper_h": [hours, hours_sd],
                "mean_usd": round(s.mean_cost_usd, 4),
                "sd_usd": round(s.sd_cost_usd, 4),
                "paper_usd": [usd, usd_sd],
                "time_within_1sd": abs(s.mean_hours - hours) <= hours_sd,
                "cost_within_1sd": abs(s.mean_cost_usd - usd) <= usd_sd,
                "revoked_fraction": round(s.revoked / s.servers, 4),
            }
            if mode == "on-demand-eff":
                row["efficiency"] = round(on_demand_efficiency(n), 4)
            print(json.dumps(row))
        # weight each size by its share of the paper's 448 servers (32 runs x 2, 4, 8)
        print(
            json.dumps(
                {
                    "mode": mode,
                    "pooled_revoked_fraction": round(revoked / servers, 4),
                    "paper": round(28 / 448, 4),
                }
            )
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "runs",
        nargs="?",
        type=int,
        default=5000,
        metavar="RUNS",
        help="seeded runs per size",
    )
    args = p.parse_args()
    if args.runs < 1:
        p.error(f"RUNS must be at least 1, not {args.runs}")
    main(args.runs)
