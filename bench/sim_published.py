"""Our figures beside published ones: Pollux workload-6 and EasyScale's workload.

Pollux (OSDI'21 artifact, workload-6 on 16x4 T4): average JCT Pollux 2446 s, Tiresias 3470 s.
EasyScale (SC'23 artifact, 68-row workload on 32 V100 + 16 P100 + 16 T4; reference data read
from ../shared/data/easyscale beside the repository, skipped if absent): average JCT / makespan
YARN-CS 8905 / 16560, EasyScale-homo 1071 / 6720, EasyScale-heter 677 / 6000; and the GPU-hours
each EasyScale variant used, ours beside the artifact's allocation trace (GPUs in use every 60 s).
Prints JSON lines.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from shoal.sim.run import simulate

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"  # beside the repository
EASYSCALE = SHARED / "data" / "easyscale" / "simulator_workloads_test.csv"
EASYSCALE_ALLOC = EASYSCALE.with_name("simulator_plot_trace_alloc.csv")
POLLUX_PUBLISHED = {"pollux": 2446.0, "tiresias": 3470.0}
EASYSCALE_PUBLISHED = {
    "yarn-cs": (8904.9685, 16560.0),
    "easyscale-homo": (1070.5008, 6720.0),
    "easyscale-heter": (676.7497, 6000.0),
}


def published_gpu_hours() -> dict[str, float]:
    """GPU-hours per EasyScale variant from the artifact's trace of GPUs in use every 60 s."""
    with EASYSCALE_ALLOC.open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    columns = {"easyscale-homo": "EasyScale_{homo}", "easyscale-heter": "EasyScale_{heter}"}
    return {p: sum(int(r[c]) for r in rows) * 60 / 3600 for p, c in columns.items()}


def main() -> None:
    for policy in ("tiresias", "pollux", "shoal"):
        s = simulate(policy, "pollux:6", "pollux")
        print(
            json.dumps(
                {
                    "workload": "pollux:6",
                    "policy": policy,
                    "avg_jct_s": round(s["avg_jct_s"]),
                    "published_avg_jct_s": POLLUX_PUBLISHED.get(policy),
                }
            )
        )
    if not EASYSCALE.is_file():
        print(json.dumps({"easyscale": "skipped: reference data absent"}))
        return
    ours = {p: simulate(p, str(EASYSCALE), "easyscale") for p in EASYSCALE_PUBLISHED}
    gpu_hours = published_gpu_hours()
    for p, s in ours.items():
        print(
            json.dumps(
                {
                    "workload": "easyscale",
                    "policy": p,
                    "avg_jct_s": round(s["avg_jct_s"]),
                    "makespan_s": round(s["makespan_s"]),
                    "published": EASYSCALE_PUBLISHED[p],
                    "gpu_hours": round(s["gpu_hours"], 1),
                    "published_gpu_hours": (round(gpu_hours[p], 1) if p in gpu_hours else None),
                }
            )
        )
    for a, b in (
        ("yarn-cs", "easyscale-heter"),
        ("yarn-cs", "easyscale-homo"),
        ("easyscale-homo", "easyscale-heter"),
    ):
        print(
            json.dumps(
                {
                    "ratio": f"{a}/{b}",
                    "jct": round(ours[a]["avg_jct_s"] / ours[b]["avg_jct_s"], 2),
                    "makespan": round(ours[a]["makespan_s"] / ours[b]["makespan_s"], 2),
                    "published_jct": round(
                        EASYSCALE_PUBLISHED[a][0] / EASYSCALE_PUBLISHED[b][0], 2
                    ),
                    "published_makespan": round(
                        EASYSCALE_PUBLISHED[a][1] / EASYSCALE_PUBLISHED[b][1], 2
                    ),
                }
            )
        )


if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    ).parse_args()
    main()
