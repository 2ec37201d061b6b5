"""Simulator speed: Philly jobs on the 1,024-GPU heterogeneous cluster with EasyScale-heter.

Prints JSON lines: jobs, wall seconds (simulation only, workload loading excluded), events,
events per second. Usage: python bench/sim_speed.py [N ...]   (default 1000 10000 all)
"""

from __future__ import annotations

import json
import sys
import time

from shoal.cluster.nodes import parse_cluster
from shoal.sim.policies import make_policy
from shoal.sim.report import summarize
from shoal.sim.simulator import SimConfig, Simulator
from shoal.sim.workloads import sample_philly


def main(sizes: list[str]) -> None:
    for size in sizes:
        count = None if size == "all" else int(size)
        jobs = sample_philly(count, seed=0)
        sim = Simulator(
            jobs, parse_cluster("hetero-1024"), make_policy("easyscale-heter"), SimConfig()
        )
        start = time.perf_counter()
        result = sim.run()
        wall = time.perf_counter() - start
        summary = summarize(result)
        print(
            json.dumps(
                {
                    "jobs": len(jobs),
                    "wall_s": round(wall, 2),
                    "events": result.events,
                    "events_per_s": round(result.events / wall),
                    "finished": summary["finished"],
                    "avg_jct_s": round(summary["avg_jct_s"] or 0),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["1000", "10000", "all"])
