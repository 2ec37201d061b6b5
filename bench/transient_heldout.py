"""Held-out predictions of the parameter-server model beside the paper's measured mean +- sd.

For each split (`size`: fit on 1-, 2- and 4-worker clusters, predict the 8-worker ones; `kind`:
fit on K80 and V100, predict P100), fits the model on the fit side only, prints the fitted
parameters (the start offset, measured on the fit side's runs, among them), then one row per
held-out cluster: measured mean +- sd over its runs, the prediction, the error and
z = (prediction - mean) / sd. A markdown table unless --json.
Usage: python bench/transient_heldout.py [REPLAYS] [--json]   (REPLAYS: seeded runs for the
spot cluster with revocations, default 400)
"""

from __future__ import annotations

import argparse
import json

from shoal.sim.transient_fit import SPLITS, make_split, predict


def _row(p) -> dict:
    return {
        "config": p.name,
        "kind": p.kind,
        "workers": p.num_workers,
        "ps": p.num_ps,
        "tier": p.tier,
        "runs": p.runs,
        "measured_s": round(p.measured_mean_s, 1),
        "sd_s": round(p.measured_sd_s, 1),
        "predicted_s": round(p.predicted_s, 1),
        "error_pct": round(100 * (p.predicted_s / p.measured_mean_s - 1), 1),
        "z": None if p.z is None else round(p.z, 2),
        "within_1sd": p.within_one_sd,
    }


def main(replays: int, as_json: bool) -> None:
    for name in SPLITS:
        split = make_split(name)
        model = split.model()
        rows = [_row(p) for p in predict(split, spot_replays=replays)]
        params = {
            "compute_ms": {k: round(v * 1000, 2) for k, v in sorted(model.compute_s.items())},
            "latency_ms": round(model.latency_s * 1000, 2),
            "ps_service_ms": round(model.ps_service_s * 1000, 2),
            "service_sd_ms": round(model.service_sd_s * 1000, 2),
            "cycle_sd_ms": round(model.cycle_sd_s * 1000, 2),
            "local_update_ms": round(model.local_update_s * 1000, 2),
            "offset_s": round(model.offset_s, 1),
        }
        fitted = [m.name for m in split.fit_rows]
        if as_json:
            print(json.dumps({"split": name, "fit_rows": fitted, "model": params}))
            for row in rows:
                print(json.dumps({"split": name, **row}))
            continue
        print(f"\n### split `{name}`: fit on {len(fitted)} configurations ({', '.join(fitted)})")
        print(f"\nfitted: {params}\n")
        print(
            "| held out | kind | workers | PS | runs | measured s (mean +- sd) | predicted s "
            "| error | z | within 1 sd |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            within = {True: "yes", False: "**no**", None: "n/a (1 run)"}[r["within_1sd"]]
            print(
                f"| {r['config']} | {r['kind']} | {r['workers']} | {r['ps']} | {r['runs']} "
                f"| {r['measured_s']:.0f} +- {r['sd_s']:.0f} | {r['predicted_s']:.0f} "
                f"| {r['error_pct']:+.1f} % | {r['z'] if r['z'] is not None else '-'} | {within} |"
            )


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "replays",
        metavar="REPLAYS",
        nargs="?",
        type=int,
        default=400,
        help="seeded runs for the spot cluster with revocations",
    )
    p.add_argument("--json", action="store_true", help="JSON lines, not a markdown table")
    args = p.parse_args()
    if args.replays < 1:
        p.error(f"REPLAYS must be at least 1, not {args.replays}")
    main(args.replays, args.json)
