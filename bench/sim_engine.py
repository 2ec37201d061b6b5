"""SimPy or a heap? The cost of the event core alone, measured the way the simulator uses it.

Workload: N jobs arrive at random times; each runs a random duration, then completes; every
arrival and completion triggers a scheduling callback that does no work. That is the skeleton of
`shoal.sim.simulator` (which uses the heap). Prints JSON: events per second for a plain
`heapq` loop and for SimPy 4 processes (skipped if simpy is not installed).
Usage: python bench/sim_engine.py [N]   (default 100000)
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import time


def heap_core(arrivals: list[float], durations: list[float]) -> int:
    heap = [(t, i, 0) for i, t in enumerate(arrivals)]
    heapq.heapify(heap)
    events = 0
    while heap:
        now, i, kind = heapq.heappop(heap)
        events += 1
        if kind == 0:
            heapq.heappush(heap, (now + durations[i], i, 1))
    return events


def simpy_core(arrivals: list[float], durations: list[float]) -> int:
    import simpy

    env = simpy.Environment()
    counter = [0]

    def job(i: int):
        yield env.timeout(arrivals[i])
        counter[0] += 1
        yield env.timeout(durations[i])
        counter[0] += 1

    for i in range(len(arrivals)):
        env.process(job(i))
    env.run()
    return counter[0]


def main(n: int) -> None:
    rng = random.Random(0)
    arrivals = [rng.uniform(0, 1e6) for _ in range(n)]
    durations = [rng.expovariate(1 / 3600) for _ in range(n)]
    cores = {"heap": heap_core}
    try:
        import simpy  # noqa: F401

        cores["simpy"] = simpy_core
    except ImportError:
        pass
    for name, core in cores.items():
        start = time.process_time()
        core(arrivals, durations)
        cpu = time.process_time() - start
        print(
            json.dumps(
                {
                    "core": name,
                    "events": 2 * n,
                    "cpu_s": round(cpu, 3),
                    "events_per_cpu_s": round(2 * n / cpu),
                }
            )
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("n", nargs="?", type=int, default=100000, metavar="N", help="jobs")
    args = p.parse_args()
    if args.n < 1:
        p.error(f"N must be at least 1, not {args.n}")
    main(args.n)
