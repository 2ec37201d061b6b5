"""Simulator speed: Philly jobs on the 1,024-GPU heterogeneous cluster with EasyScale-heter.

Prints JSON lines: jobs, wall and CPU seconds of this process (simulation only, workload loading
excluded; the simulator is single-threaded, so CPU seconds are one core's time), events, events
per CPU second. Usage: python bench/sim_speed.py [N ...]   (default 1000 10000 all)
"""

from __future__ import annotations

import argparse
import json
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
        start, cpu0 = time.perf_counter(), time.process_time()
        result = sim.run()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
        summary = summarize(result)
        print(
            json.dumps(
                {
                    "jobs": len(jobs),
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 2),
                    "events": result.events,
                    "events_per_cpu_s": round(result.events / cpu),
                    "finished": summary["finished"],
                    "avg_jct_s": round(summary["avg_jct_s"] or 0),
                }
            ),
            flush=True,
        )


def _size(text: str) -> str:
    if text != "all" and not (text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"not a job count or 'all': {text!r}")
    return text


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "sizes",
        nargs="*",
        type=_size,
        default=["1000", "10000", "all"],
        metavar="N",
        help="Philly jobs per run, or all",
    )
    main(p.parse_args().sizes)
