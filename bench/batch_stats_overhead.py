"""The cost of the adaptive batch's statistics: step time with them on vs off, side by side.

    python bench/batch_stats_overhead.py [--steps 60] [--repeats 5] [--workers v100,v100]
        [--every P]

Off: the fixed policy (nothing measured, the step's message as before). On: `--batch-policy
jabas --batch-bounds B:B --batch-every P`: every step computes each micro-batch's |g_j|^2 and
sends them in the message (the noise scale's inputs); every P-th step also sends the extra
exact half-sum for the similarity (P = 1: on every step, the costliest setting; the default
P = 100 is JABAS's interval); the bounds pin the batch, so both sides run the same steps.
Each repeat runs both sides back to back (in rotating order) on the same job; the figure is the
median of the repeats' own ratios of steady-state step periods (issue 13's bar: <= 1.03x).
"""

from __future__ import annotations

import argparse
import json
import statistics

import _args
from _common import (
    JOBS,
    as_options,
    check_runs,
    machine,
    per_repeat,
    rotation,
    shoal_run_rows,
    steady,
    step_periods,
)
from step_time import CONFIGS  # the same (b, B) per job as the engine's step-time bench


def side_flags(side: str, batch: int, every: int) -> list[str]:
    if side == "off":
        return []
    bounds = f"{batch}:{batch}"
    return ["--batch-policy", "jabas", "--batch-bounds", bounds, "--batch-every", str(every)]


def measure(job: str, args) -> dict:
    config = CONFIGS[job]
    medians: dict[str, list[float]] = {"off": [], "on": []}
    for repeat in range(args.repeats):
        for side in rotation(["off", "on"], repeat):
            rows = shoal_run_rows(
                str(JOBS[job]),
                args.workers.split(","),
                args.steps,
                as_options(config),
                flags=side_flags(side, config["global_batch_size"], args.every),
            )
            if side == "on":  # the statistics were taken: the run logged them
                assert rows[-1].get("lr_factor") is not None, "no statistics were logged"
            medians[side].append(steady(step_periods(rows), args.warmup))
    ratios = per_repeat(medians["on"], medians["off"])
    return {
        "job": job,
        "config": config,
        "workers": args.workers,
        "every": args.every,
        "off_s": statistics.median(medians["off"]),
        "on_s": statistics.median(medians["on"]),
        "on_over_off": statistics.median(ratios),
        "per_repeat": [round(r, 4) for r in ratios],
        "machine": machine(),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=60, help="steps per run")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    p.add_argument("--repeats", type=int, default=5, help="runs of each side")
    p.add_argument(
        "--workers", type=_args.workers, default="v100,v100", help="the emulated workers' kinds"
    )
    p.add_argument("--every", type=int, default=100, help="the similarity's interval P")
    p.add_argument("--job", choices=sorted(CONFIGS), help="one job (None: both)")
    args = p.parse_args()
    check_runs(p, args)
    if args.every < 1:
        p.error(f"--every must be at least 1, not {args.every}")
    for job in [args.job] if args.job else sorted(CONFIGS):
        print(json.dumps(measure(job, args)), flush=True)


if __name__ == "__main__":
    main()
